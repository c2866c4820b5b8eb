// Overview: node, version, uptime, object totals, and charts of message
// rates and queued messages over the last minutes.
import { h, clear, stat, props, fmtNumber, fmtBytes, fmtDuration, card } from '../dom.js'
import { get, hasTag } from '../api.js'
import { Chart, ratesOf, valuesOf } from '../chart.js'
import { historyQuery } from './common.js'

const RATE_SERIES = [['publish', 'Publish'], ['deliver', 'Deliver'], ['get', 'Get'], ['ack', 'Ack'], ['redeliver', 'Redeliver']]

export async function render ({ main }) {
  const totals = h('div', { class: 'stats', id: 'totals' })
  const node = h('div', { id: 'node-info' })
  const listeners = h('div', { id: 'listeners' })
  const rates = new Chart({ title: 'Message rates', unit: '/s', id: 'chart-rates' })
  const lengths = new Chart({ title: 'Queued messages', id: 'chart-lengths' })
  clear(main, h('h1', null, 'Overview'), totals,
    h('div', { class: 'grid-2' }, h('section', { class: 'card' }, rates.el), h('section', { class: 'card' }, lengths.el)),
    h('div', { class: 'grid-2' }, card('Node', node), card('Listeners', listeners)))
  const monitoring = hasTag('monitoring')

  async function refresh () {
    const [ov, nodes] = await Promise.all([get(`api/overview?${historyQuery()}`), monitoring ? get('api/nodes') : null])
    const o = ov.object_totals || {}
    const q = ov.queue_totals || {}
    clear(totals,
      stat('Connections', fmtNumber(o.connections)), stat('Channels', fmtNumber(o.channels)),
      stat('Consumers', fmtNumber(o.consumers)), stat('Exchanges', fmtNumber(o.exchanges)),
      stat('Queues', fmtNumber(o.queues)), stat('Ready', fmtNumber(q.messages_ready)),
      stat('Unacked', fmtNumber(q.messages_unacknowledged)), stat('Total messages', fmtNumber(q.messages)))
    const ms = ov.message_stats || {}
    rates.update(RATE_SERIES.map(([k, label]) => ({ label, points: ratesOf((ms[k + '_details'] || {}).samples) })))
    lengths.update([
      { label: 'Ready', points: valuesOf((q.messages_ready_details || {}).samples) },
      { label: 'Unacked', points: valuesOf((q.messages_unacknowledged_details || {}).samples) },
      { label: 'Total', points: valuesOf((q.messages_details || {}).samples) }])
    const n = nodes && nodes[0]
    clear(node, props([
      ['Node', ov.node], ['Product', `${ov.product_name} ${ov.product_version}`], ['Uptime', fmtDuration(ov.uptime)],
      ['Memory used', n ? fmtBytes(n.mem_used) : undefined],
      ['File descriptors', n ? `${fmtNumber(n.fd_used)} of ${fmtNumber(n.fd_total)}` : undefined],
      ['Disk free', n ? fmtBytes(n.disk_free) + (n.disk_free_alarm ? ' (alarm)' : '') : undefined],
      ['Processors', n ? n.processors : undefined]]))
    clear(listeners, props((ov.listeners || []).map(l => [l.protocol, `${l.ip_address}:${l.port}`])))
  }
  await refresh()
  return { refresh, destroy () { rates.destroy(); lengths.destroy() } }
}
