// Consumers of every queue the user can see.
import { h, clear, fmtNumber, argsList, card } from '../dom.js'
import { Table } from '../table.js'
import { queueHref, channelHref, nameLink, yesNo } from './common.js'

export async function render ({ main, vhost }) {
  const base = vhost ? `api/consumers/${encodeURIComponent(vhost)}` : 'api/consumers'
  const columns = [
    ...(vhost ? [] : [{ label: 'Vhost', key: 'queue.vhost', render: c => c.queue.vhost }]),
    { label: 'Queue', key: 'queue.name', cls: 'name', render: c => nameLink(queueHref(c.queue.vhost, c.queue.name), c.queue.name) },
    { label: 'Channel', render: c => nameLink(channelHref(c.channel_details.name), c.channel_details.name) },
    { label: 'Consumer tag', key: 'consumer_tag', render: c => c.consumer_tag },
    { label: 'Ack required', render: c => yesNo(c.ack_required) },
    { label: 'Exclusive', render: c => yesNo(c.exclusive) },
    { label: 'Prefetch', key: 'prefetch_count', num: true, render: c => fmtNumber(c.prefetch_count) },
    { label: 'Arguments', render: c => argsList(c.arguments) }
  ]
  const table = new Table({ id: 'consumers-table', path: () => base, columns, sort: 'queue.name', filter: false, empty: 'No consumers.' })
  clear(main, h('h1', null, 'Consumers'), card(null, table.el))
  await table.refresh()
  return { refresh: () => table.refresh() }
}
