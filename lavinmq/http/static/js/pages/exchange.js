// One exchange: details, rate chart, bindings both ways (add, remove),
// publish a message, delete.
import { h, clear, props, argsList, toast, card, fmtNumber, fmtBytes, fmtDuration } from '../dom.js'
import { get, post, del, enc } from '../api.js'
import { Chart, ratesOf } from '../chart.js'
import { field, input, select, ArgsEditor, onSubmit, confirmed, publishForm, REPLAY_ARGS } from '../forms.js'
import { historyQuery, exchangeHref, queueHref, nameLink, yesNo, Guard } from './common.js'

export async function render ({ main, params, navigate }) {
  const [vhost, urlName] = params
  const name = urlName === 'amq.default' ? '' : urlName
  const shown = name === '' ? '(AMQP default)' : name
  const base = `api/exchanges/${enc(vhost)}/${enc(urlName)}`
  const guard = new Guard()
  const details = h('div', { id: 'exchange-details' })
  const outgoing = h('div', { class: 'table-wrap', id: 'bindings-source' })
  const incoming = h('div', { class: 'table-wrap', id: 'bindings-destination' })
  const rates = new Chart({ title: 'Message rates', unit: '/s', id: 'chart-rates' })
  const predeclared = name === '' || name.startsWith('amq.')

  // a persistent exchange: a new binding may ask for its stored messages
  const persistent = name !== '' && Boolean((await get(`${base}?columns=persist`)).persist)
  const bindArgs = new ArgsEditor({ suggestions: persistent ? REPLAY_ARGS : [] })
  const bindForm = h('form', { class: 'form-grid', id: 'bind-exchange' },
    field('To', select('kind', [['q', 'Queue'], ['e', 'Exchange']], 'q')),
    field('Destination', input('destination', { required: true })),
    field('Routing key', input('routing_key')),
    field('Arguments', bindArgs.el),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Bind')))
  onSubmit(bindForm, async (data) => {
    await post(`api/bindings/${enc(vhost)}/e/${enc(name)}/${data.get('kind')}/${enc(data.get('destination'))}`,
      { routing_key: data.get('routing_key'), arguments: bindArgs.value() })
    toast('Binding added.')
    bindForm.reset(); bindArgs.reset()
    await refresh()
  })

  function bindingTable (list, otherSide) {
    if (!list.length) return h('p', { class: 'muted' }, 'No bindings.')
    return h('table', null,
      h('thead', null, h('tr', null, [otherSide === 'destination' ? 'To' : 'From', 'Routing key', 'Arguments', ''].map(t => h('th', null, t)))),
      h('tbody', null, list.map(b => {
        const other = otherSide === 'destination' ? b.destination : b.source
        const isQueue = otherSide === 'destination' && b.destination_type === 'queue'
        const kind = b.destination_type === 'queue' ? 'q' : 'e'
        return h('tr', null,
          h('td', null, isQueue ? nameLink(queueHref(vhost, other), other) : nameLink(exchangeHref(vhost, other), other),
            isQueue ? h('span', { class: 'muted' }, ' (queue)') : h('span', { class: 'muted' }, ' (exchange)')),
          h('td', { class: 'mono' }, b.routing_key), h('td', null, argsList(b.arguments)),
          h('td', null, h('button', {
            class: 'secondary small unbind',
            onclick: async () => {
              try {
                await del(`api/bindings/${enc(vhost)}/e/${enc(b.source)}/${kind}/${enc(b.destination)}/${enc(b.properties_key)}`)
                toast('Binding removed.')
                await refresh()
              } catch (e) { toast(e.message, 'error') }
            }
          }, 'Unbind')))
      })))
  }

  async function refresh () {
    return guard.refresh(async () => {
      const [x, src, dst] = await Promise.all([get(`${base}?${historyQuery()}`),
        get(`${base}/bindings/source`), get(`${base}/bindings/destination`)])
      clear(details, props([['Virtual host', x.vhost], ['Type', x.type], ['Durable', yesNo(x.durable)],
        ['Auto delete', yesNo(x.auto_delete)], ['Internal', yesNo(x.internal)], ['Arguments', argsList(x.arguments)],
        ['Policy', x.policy || 'none'], ...storedRows(x.persist)]))
      const ms = x.message_stats || {}
      rates.update([['publish_in', 'Publish in'], ['publish_out', 'Publish out']]
        .map(([k, label]) => ({ label, points: ratesOf((ms[k + '_details'] || {}).samples) })))
      clear(outgoing, bindingTable(src, 'destination'))
      clear(incoming, bindingTable(dst, 'source'))
    })
  }

  function storedRows (p) {
    if (!p) return []
    const keeps = [p.max_messages ? `${fmtNumber(p.max_messages)} messages` : null,
      p.max_ms ? (p.max_ms < 1000 ? `${p.max_ms} ms` : fmtDuration(p.max_ms)) : null].filter(Boolean).join(', ') || 'everything'
    return [['Stored messages', fmtNumber(p.messages)], ['Stored bytes', fmtBytes(p.bytes)],
      ['Offsets', p.messages ? `${p.first_offset} – ${p.last_offset}` : '–'], ['Keeps', keeps]]
  }

  const deleteButton = predeclared ? h('p', { class: 'muted' }, 'Predeclared exchanges cannot be deleted.') : h('button', {
    class: 'danger', id: 'delete',
    onclick: async () => {
      if (!confirmed(`Delete the exchange ${name}?`)) return
      try {
        await guard.remove(() => del(base))
        toast(`Exchange ${name} deleted.`)
        navigate('#/exchanges')
      } catch (e) { toast(e.message, 'error') }
    }
  }, 'Delete exchange')

  clear(main,
    h('h1', null, shown, h('small', null, `exchange in vhost ${vhost}`)),
    h('div', { class: 'grid-2' }, card('Details', details), h('section', { class: 'card' }, rates.el)),
    card('Bindings from this exchange', outgoing, name === '' ? null : [h('h2', null, 'Add a binding from this exchange'), bindForm]),
    card('Bindings to this exchange', incoming),
    h('details', { class: 'card', id: 'publish-box' }, h('summary', null, 'Publish a message'), publishForm({ vhost, exchange: urlName })),
    card('Actions', deleteButton))
  await refresh()
  return { refresh, destroy () { rates.destroy(); guard.gone = true } }
}
