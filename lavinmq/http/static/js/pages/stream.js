// One stream queue, as LavinMQ's stream page: its offsets (first, last,
// where each consumer is, what tracked consumer tags stored), size and
// segments, rates, bindings, publish, and reading messages from an offset
// (first, last, next, a number, a timestamp or an interval such as 1h)
// without a consumer, and copying its messages to another queue.
import { h, clear, stat, props, fmtNumber, fmtBytes, fmtRate, argsList, toast, card } from '../dom.js'
import { get, post, del, enc, hasTag } from '../api.js'
import { Chart, ratesOf } from '../chart.js'
import { field, input, select, ArgsEditor, onSubmit, confirmed, publishForm } from '../forms.js'
import { historyQuery, stateBadge, exchangeHref, channelHref, nameLink, yesNo, Guard } from './common.js'
import { transferForm } from './transfer.js'

function fmtTime (ms) {
  return ms ? new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC') : '–'
}

function offsetOf (m) { return ((m.properties || {}).headers || {})['x-stream-offset'] }

export async function render ({ main, params, navigate }) {
  const [vhost, name] = params
  const base = `api/queues/${enc(vhost)}/${enc(name)}`
  const guard = new Guard()
  const stats = h('div', { class: 'stats', id: 'stream-stats' })
  const details = h('div', { id: 'stream-details' })
  const consumers = h('div', { class: 'table-wrap', id: 'stream-consumers' })
  const offsets = h('div', { class: 'table-wrap', id: 'stream-offsets' })
  const bindings = h('div', { class: 'table-wrap', id: 'stream-bindings' })
  const rates = new Chart({ title: 'Message rates', unit: '/s', id: 'chart-rates' })
  const messages = h('div', { id: 'stream-messages' })

  const bindArgs = new ArgsEditor()
  const bindForm = h('form', { class: 'form-grid', id: 'bind-stream' },
    field('From exchange', input('source', { required: true })),
    field('Routing key', input('routing_key')),
    field('Arguments', bindArgs.el),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Bind')))
  onSubmit(bindForm, async (data) => {
    await post(`api/bindings/${enc(vhost)}/e/${enc(data.get('source'))}/q/${enc(name)}`,
      { routing_key: data.get('routing_key'), arguments: bindArgs.value() })
    toast('Binding added.')
    bindForm.reset(); bindArgs.reset()
    await refresh()
  })

  // LavinMQ's "Get messages" of a stream: read from an offset, nothing is removed
  const readForm = h('form', { class: 'form-grid', id: 'read-stream' },
    field('Offset', input('offset', { value: 'first', required: true }),
      'first, last, next, an offset number, or an interval such as 1h'),
    field('Messages', input('count', { type: 'number', min: 1, max: 100000, value: 10, required: true })),
    field('Encoding', select('encoding', [['auto', 'Auto: string if UTF-8, else base64'], ['base64', 'Base64']], 'auto')),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Read messages')))
  onSubmit(readForm, async (data) => {
    const got = await post(`${base}/stream`, {
      offset: data.get('offset'), count: Number(data.get('count')), encoding: data.get('encoding'), truncate: 50000
    })
    if (!got.length) return clear(messages, h('p', { class: 'muted' }, 'No messages at that offset.'))
    clear(messages, got.map(m => h('div', { class: 'message', dataset: { offset: offsetOf(m) } },
      h('h2', null, `Offset ${offsetOf(m)}`),
      props([['Exchange', m.exchange === '' ? '(AMQP default)' : m.exchange], ['Routing key', m.routing_key],
        ['Properties', argsList(m.properties)],
        ['Payload', `${fmtNumber(m.payload_bytes)} bytes, encoding: ${m.payload_encoding}`]]),
      h('pre', { class: 'payload' }, m.payload))))
  })

  async function refresh () {
    return guard.refresh(async () => {
      const [q, bs] = await Promise.all([get(`${base}?${historyQuery()}`), get(`${base}/bindings`)])
      if (q.type !== 'stream') return navigate(`#/queue/${enc(vhost)}/${enc(name)}`)
      const st = q.stream || {}
      clear(stats, stat('State', stateBadge(q.state)), stat('Messages', fmtNumber(q.messages)),
        stat('Bytes', fmtBytes(st.message_bytes)), stat('First offset', fmtNumber(st.first_offset)),
        stat('Last offset', fmtNumber(st.last_offset)), stat('Segments', fmtNumber(st.segments)),
        stat('Consumers', fmtNumber(q.consumers)),
        stat('Publish', fmtRate((q.message_stats || {}).publish_details)))
      const ms = q.message_stats || {}
      rates.update([['publish', 'Publish'], ['deliver_get', 'Deliver'], ['ack', 'Ack']]
        .map(([k, label]) => ({ label, points: ratesOf((ms[k + '_details'] || {}).samples) })))
      const avg = q.messages ? st.message_bytes / q.messages : 0
      clear(details, props([['Virtual host', q.vhost], ['Arguments', argsList(q.arguments)],
        ['Policy', q.policy || 'none'], ['Effective policy', argsList(q.effective_policy_definition)],
        ['Oldest message', fmtTime(st.first_timestamp)], ['Newest message', fmtTime(st.last_timestamp)],
        ['Average size', fmtBytes(Math.round(avg))]]))
      const cons = q.consumer_details || []
      clear(consumers, cons.length
        ? h('table', null, h('thead', null, h('tr', null, ['Channel', 'Consumer tag', 'Prefetch', 'Offset', 'Last delivered', 'Tracked', 'Filtered', ''].map(t => h('th', null, t)))),
          h('tbody', null, cons.map(c => {
            const s = c.stream || {}
            const ch = c.channel_details || {}
            return h('tr', null,
              h('td', null, nameLink(channelHref(ch.name), ch.name)), h('td', null, c.consumer_tag),
              h('td', { class: 'num' }, fmtNumber(c.prefetch_count)), h('td', { class: 'num' }, fmtNumber(s.offset)),
              h('td', { class: 'num' }, fmtNumber(s.last_delivered_offset)), h('td', null, yesNo(s.automatic_offset_tracking)),
              h('td', null, yesNo(s.filtered)),
              h('td', null, h('button', {
                class: 'secondary small cancel-consumer',
                onclick: async () => {
                  if (!confirmed(`Cancel consumer ${c.consumer_tag}?`)) return
                  try {
                    await del(`api/consumers/${enc(vhost)}/${enc(ch.connection_name)}/${ch.number}/${enc(c.consumer_tag)}`)
                    toast('Consumer cancelled.')
                    await refresh()
                  } catch (e) { toast(e.message, 'error') }
                }
              }, 'Cancel')))
          })))
        : h('p', { class: 'muted' }, 'No consumers.'))
      const stored = Object.entries(st.consumer_offsets || {})
      clear(offsets, stored.length
        ? h('table', null, h('thead', null, h('tr', null, ['Consumer tag', 'Stored offset'].map(t => h('th', null, t)))),
          h('tbody', null, stored.map(([tag, off]) => h('tr', null, h('td', null, tag), h('td', { class: 'num' }, fmtNumber(off))))))
        : h('p', { class: 'muted' }, 'No tracked consumer tags.'))
      clear(bindings, h('table', null,
        h('thead', null, h('tr', null, ['From', 'Routing key', 'Arguments'].map(t => h('th', null, t)))),
        h('tbody', null, bs.map(b => h('tr', null,
          h('td', null, b.source === '' ? '(AMQP default)' : nameLink(exchangeHref(vhost, b.source), b.source)),
          h('td', { class: 'mono' }, b.routing_key), h('td', null, argsList(b.arguments)))))))
    })
  }

  clear(main,
    h('h1', null, name, h('small', null, `stream in vhost ${vhost}`)),
    stats,
    h('div', { class: 'grid-2' }, h('section', { class: 'card' }, rates.el), card('Details', details)),
    card('Consumers', consumers),
    card('Stored consumer offsets', offsets),
    card('Bindings', bindings, h('h2', null, 'Add a binding to this stream'), bindForm),
    h('details', { class: 'card', id: 'publish-box' }, h('summary', null, 'Publish a message'),
      h('p', { class: 'muted' }, 'Published through the default exchange with the stream\'s name as routing key.'),
      publishForm({ vhost, exchange: '', routingKey: name, fixedKey: true })),
    card('Read messages', h('p', { class: 'muted' }, 'Reading a stream removes nothing.'), readForm, messages),
    hasTag('administrator', 'policymaker')
      ? h('details', { class: 'card', id: 'copy-box' }, h('summary', null, 'Copy messages'),
        h('p', { class: 'muted' }, 'A shovel copies the messages the stream holds now, from its first offset, to another queue, then deletes itself. The stream keeps them.'),
        transferForm({ vhost, name, copy: true, done: refresh }))
      : null,
    card('Actions', h('div', { class: 'actions' }, h('button', {
      class: 'danger', id: 'delete',
      onclick: async () => {
        if (!confirmed(`Delete the stream ${name} and its messages?`)) return
        try {
          await guard.remove(() => del(base))
          toast(`Stream ${name} deleted.`)
          navigate('#/queues')
        } catch (e) { toast(e.message, 'error') }
      }
    }, 'Delete stream'))))
  await refresh()
  return { refresh, destroy () { rates.destroy(); guard.gone = true } }
}
