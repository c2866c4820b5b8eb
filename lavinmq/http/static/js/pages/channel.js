// One channel: details, message rates, its consumers.
import { h, clear, props, fmtNumber, argsList, card } from '../dom.js'
import { get, enc } from '../api.js'
import { Chart, ratesOf } from '../chart.js'
import { historyQuery, connectionHref, queueHref, nameLink, stateBadge, yesNo, Guard } from './common.js'
import { mode } from './channels.js'

export async function render ({ main, params }) {
  const [name] = params
  const base = `api/channels/${enc(name)}`
  const guard = new Guard()
  const details = h('div', { id: 'channel-details' })
  const consumers = h('div', { class: 'table-wrap', id: 'channel-consumers' })
  const rates = new Chart({ title: 'Message rates', unit: '/s', id: 'chart-rates' })
  async function refresh () {
    return guard.refresh(async () => {
      const ch = await get(`${base}?${historyQuery()}`)
      clear(details, props([['Connection', nameLink(connectionHref(ch.connection_details.name), ch.connection_details.name)],
        ['Virtual host', ch.vhost], ['User', ch.user], ['State', stateBadge(ch.state)], ['Mode', mode(ch)],
        ['Prefetch (per consumer)', fmtNumber(ch.prefetch_count)], ['Prefetch (global)', fmtNumber(ch.global_prefetch_count)],
        ['Unacked', fmtNumber(ch.messages_unacknowledged)], ['Consumers', fmtNumber(ch.consumer_count)]]))
      const ms = ch.message_stats || {}
      rates.update([['publish', 'Publish'], ['deliver', 'Deliver'], ['ack', 'Ack']]
        .map(([k, label]) => ({ label, points: ratesOf((ms[k + '_details'] || {}).samples) })))
      const cons = ch.consumer_details || []
      clear(consumers, cons.length
        ? h('table', null, h('thead', null, h('tr', null, ['Queue', 'Consumer tag', 'Ack required', 'Exclusive', 'Arguments'].map(t => h('th', null, t)))),
          h('tbody', null, cons.map(c => h('tr', null, h('td', null, nameLink(queueHref(c.queue.vhost, c.queue.name), c.queue.name)),
            h('td', null, c.consumer_tag), h('td', null, yesNo(c.ack_required)), h('td', null, yesNo(c.exclusive)),
            h('td', null, argsList(c.arguments))))))
        : h('p', { class: 'muted' }, 'No consumers.'))
    })
  }
  clear(main, h('h1', null, name, h('small', null, 'channel')),
    h('div', { class: 'grid-2' }, card('Details', details), h('section', { class: 'card' }, rates.el)),
    card('Consumers', consumers))
  await refresh()
  return { refresh, destroy () { rates.destroy(); guard.gone = true } }
}
