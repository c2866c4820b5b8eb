// One queue: state and counts, rate and length charts, arguments and
// policy, consumers, bindings (add, remove), publish, get messages, move
// messages to another queue, purge, delete, pause/resume when the
// broker's API has them, and restart when the queue is closed, as in
// LavinMQ. A stream has a page of its own (stream.js), as in LavinMQ.
import { h, clear, stat, props, fmtNumber, fmtBytes, fmtRate, argsList, toast, card } from '../dom.js'
import { get, put, post, del, enc, hasTag } from '../api.js'
import { Chart, ratesOf, valuesOf } from '../chart.js'
import { field, input, select, ArgsEditor, onSubmit, confirmed, publishForm } from '../forms.js'
import { historyQuery, stateBadge, exchangeHref, channelHref, nameLink, yesNo, Guard } from './common.js'
import { transferForm } from './transfer.js'

let pauseSupport = null      // whether the API offers queue pause/resume (asked once)
async function canPause () {
  if (pauseSupport === null) {
    try {
      const doc = await get('api/openapi.json')
      pauseSupport = Object.keys(doc.paths || {}).some(p => /^\/api\/queues\/\{[^}]+\}\/\{[^}]+\}\/pause$/.test(p))
    } catch (e) { pauseSupport = false }
  }
  return pauseSupport
}

export async function render ({ main, params, navigate }) {
  const [vhost, name] = params
  const base = `api/queues/${enc(vhost)}/${enc(name)}`
  const guard = new Guard()
  const stats = h('div', { class: 'stats', id: 'queue-stats' })
  const details = h('div', { id: 'queue-details' })
  const consumers = h('div', { class: 'table-wrap', id: 'queue-consumers' })
  const bindings = h('div', { class: 'table-wrap', id: 'queue-bindings' })
  const rates = new Chart({ title: 'Message rates', unit: '/s', id: 'chart-rates' })
  const lengths = new Chart({ title: 'Queued messages', id: 'chart-lengths' })
  const messages = h('div', { id: 'got-messages' })
  const actions = h('div', { class: 'actions', id: 'queue-actions' })

  // bindings: add from an exchange
  const bindArgs = new ArgsEditor()
  const bindForm = h('form', { class: 'form-grid', id: 'bind-queue' },
    field('From exchange', input('source', { required: true, list: 'exchange-names' })),
    h('datalist', { id: 'exchange-names' }),
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

  // get messages
  const getForm = h('form', { class: 'form-grid', id: 'get-messages' },
    field('Ack mode', select('ackmode', [
      ['ack_requeue_true', 'Nack, requeue'], ['ack_requeue_false', 'Ack, remove from queue'],
      ['reject_requeue_true', 'Reject, requeue'], ['reject_requeue_false', 'Reject, no requeue']], 'ack_requeue_true')),
    field('Encoding', select('encoding', [['auto', 'Auto: string if UTF-8, else base64'], ['base64', 'Base64']], 'auto')),
    field('Messages', input('count', { type: 'number', min: 1, value: 1, required: true })),
    field('Truncate at', input('truncate', { type: 'number', min: 1, value: 50000 }), 'bytes'),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Get messages')))
  onSubmit(getForm, async (data) => {
    const body = { count: Number(data.get('count')), ackmode: data.get('ackmode'), encoding: data.get('encoding') }
    if (data.get('truncate')) body.truncate = Number(data.get('truncate'))
    const got = await post(`${base}/get`, body)
    showMessages(got)
    await refresh()
  })

  function showMessages (got) {
    if (!got.length) return clear(messages, h('p', { class: 'muted' }, 'The queue is empty.'))
    clear(messages, got.map((m, i) => h('div', { class: 'message' },
      h('h2', null, `Message ${i + 1}`),
      props([['Exchange', m.exchange === '' ? '(AMQP default)' : m.exchange], ['Routing key', m.routing_key],
        ['Redelivered', yesNo(m.redelivered)], ['Properties', argsList(m.properties)],
        ['Payload', `${fmtNumber(m.payload_bytes)} bytes, encoding: ${m.payload_encoding}`],
        ['Messages left', fmtNumber(m.message_count)]]),
      h('pre', { class: 'payload' }, m.payload))))
  }

  async function remove (what, fn, then) {
    await guard.remove(fn)
    toast(what)
    if (then) navigate(then)
  }

  function buildActions (q, pausable) {
    const buttons = [
      h('button', {
        class: 'secondary', id: 'purge',
        onclick: async () => {
          if (!confirmed(`Purge all ${fmtNumber(q.messages_ready)} ready messages of ${name}?`)) return
          try { await del(`${base}/contents`); toast('Queue purged.'); await refresh() } catch (e) { toast(e.message, 'error') }
        }
      }, 'Purge messages'),
      h('button', {
        class: 'danger', id: 'delete',
        onclick: async () => {
          if (!confirmed(`Delete the queue ${name} and its messages?`)) return
          try { await remove(`Queue ${name} deleted.`, () => del(base), '#/queues') } catch (e) { toast(e.message, 'error') }
        }
      }, 'Delete queue')]
    if (q.state === 'closed') {
      // LavinMQ's restart: a queue closed by an error is opened again from its files
      buttons.unshift(h('button', {
        class: 'secondary', id: 'restart',
        onclick: async () => {
          if (!confirmed(`Restart the queue ${name}? It is opened again from its files.`)) return
          try { await put(`${base}/restart`); toast('Queue restarted.'); await refresh() } catch (e) { toast(e.message, 'error') }
        }
      }, 'Restart queue'))
    } else if (pausable) {
      const paused = q.state === 'paused'
      buttons.unshift(h('button', {
        class: 'secondary', id: paused ? 'resume' : 'pause',
        onclick: async () => {
          try { await put(`${base}/${paused ? 'resume' : 'pause'}`); toast(paused ? 'Queue resumed.' : 'Queue paused.'); await refresh() } catch (e) { toast(e.message, 'error') }
        }
      }, paused ? 'Resume' : 'Pause'))
    }
    clear(actions, buttons)
  }

  const pausable = await canPause()
  async function refresh () {
    return guard.refresh(async () => {
      const [q, bs] = await Promise.all([get(`${base}?${historyQuery()}`), get(`${base}/bindings`)])
      if (q.type === 'stream') return navigate(`#/stream/${enc(vhost)}/${enc(name)}`)   // its own page, as LavinMQ's
      clear(stats, stat('State', stateBadge(q.state)), stat('Ready', fmtNumber(q.messages_ready)),
        stat('Unacked', h('a', { href: `#/unacked/${enc(vhost)}/${enc(name)}`, id: 'unacked-link' }, fmtNumber(q.messages_unacknowledged))),
        stat('Total', fmtNumber(q.messages)),
        stat('Consumers', fmtNumber(q.consumers)),
        stat('Ready bytes', fmtBytes(q.message_bytes_ready)), stat('Publish', fmtRate((q.message_stats || {}).publish_details)),
        stat('Deliver/get', fmtRate((q.message_stats || {}).deliver_get_details)))
      const ms = q.message_stats || {}
      rates.update([['publish', 'Publish'], ['deliver_get', 'Deliver/get'], ['ack', 'Ack'], ['redeliver', 'Redeliver']]
        .map(([k, label]) => ({ label, points: ratesOf((ms[k + '_details'] || {}).samples) })))
      lengths.update([['messages_ready', 'Ready'], ['messages_unacknowledged', 'Unacked'], ['messages', 'Total']]
        .map(([k, label]) => ({ label, points: valuesOf((q[k + '_details'] || {}).samples) })))
      clear(details, props([['Virtual host', q.vhost], ['Durable', yesNo(q.durable)], ['Auto delete', yesNo(q.auto_delete)],
        ['Exclusive', yesNo(q.exclusive)], ['Type', q.type], ['Node', q.node], ['Arguments', argsList(q.arguments)],
        ['Policy', q.policy || 'none'], ['Effective policy', argsList(q.effective_policy_definition)]]))
      const cons = q.consumer_details || []
      clear(consumers, cons.length
        ? h('table', null, h('thead', null, h('tr', null, ['Channel', 'Consumer tag', 'Ack required', 'Exclusive', 'Prefetch', 'Arguments'].map(t => h('th', null, t)))),
          h('tbody', null, cons.map(c => h('tr', null,
            h('td', null, nameLink(channelHref(c.channel_details.name), c.channel_details.name)),
            h('td', null, c.consumer_tag), h('td', null, yesNo(c.ack_required)), h('td', null, yesNo(c.exclusive)),
            h('td', { class: 'num' }, fmtNumber(c.prefetch_count)), h('td', null, argsList(c.arguments))))))
        : h('p', { class: 'muted' }, 'No consumers.'))
      clear(bindings, h('table', null,
        h('thead', null, h('tr', null, ['From', 'Routing key', 'Arguments', ''].map(t => h('th', null, t)))),
        h('tbody', null, bs.map(b => h('tr', null,
          h('td', null, b.source === '' ? '(AMQP default)' : nameLink(exchangeHref(vhost, b.source), b.source)),
          h('td', { class: 'mono' }, b.routing_key), h('td', null, argsList(b.arguments)),
          h('td', null, b.source === '' ? h('span', { class: 'muted' }, 'default binding') : h('button', {
            class: 'secondary small unbind',
            onclick: async () => {
              try {
                await del(`api/bindings/${enc(vhost)}/e/${enc(b.source)}/q/${enc(name)}/${enc(b.properties_key)}`)
                toast('Binding removed.')
                await refresh()
              } catch (e) { toast(e.message, 'error') }
            }
          }, 'Unbind')))))))
      buildActions(q, pausable)
    })
  }

  clear(main,
    h('h1', null, name, h('small', null, `queue in vhost ${vhost}`)),
    stats,
    h('div', { class: 'grid-2' }, h('section', { class: 'card' }, rates.el), h('section', { class: 'card' }, lengths.el)),
    h('div', { class: 'grid-2' }, card('Details', details), card('Consumers', consumers)),
    card('Bindings', bindings, h('h2', null, 'Add a binding to this queue'), bindForm),
    h('details', { class: 'card', id: 'publish-box' }, h('summary', null, 'Publish a message'),
      h('p', { class: 'muted' }, 'Published through the default exchange with the queue\'s name as routing key.'),
      publishForm({ vhost, exchange: '', routingKey: name, fixedKey: true })),
    h('details', { class: 'card', id: 'get-box' }, h('summary', null, 'Get messages'),
      h('p', { class: 'muted' }, 'Getting messages is a destructive action unless they are requeued.'), getForm, messages),
    hasTag('administrator', 'policymaker')
      ? h('details', { class: 'card', id: 'move-box' }, h('summary', null, 'Move messages'),
        h('p', { class: 'muted' }, 'A shovel moves the messages the queue holds now to another queue, then deletes itself.'),
        transferForm({ vhost, name, copy: false, done: refresh }))
      : null,
    card('Actions', actions))
  await refresh()
  get(`api/exchanges/${enc(vhost)}?columns=name`).then(xs => {
    const dl = main.querySelector('#exchange-names')
    if (dl) dl.replaceChildren(...xs.filter(x => x.name !== '').map(x => h('option', { value: x.name })))
  }).catch(() => {})
  return { refresh, destroy () { rates.destroy(); lengths.destroy(); guard.gone = true } }
}
