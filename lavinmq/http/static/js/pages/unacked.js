// A queue's unacked messages, as LavinMQ's unacked page: which channel and
// consumer (or basic.get) holds each delivery tag, and for how long.
import { h, clear, fmtNumber, card } from '../dom.js'
import { enc } from '../api.js'
import { Table } from '../table.js'
import { channelHref, nameLink, queueHref } from './common.js'

export async function render ({ main, params }) {
  const [vhost, name] = params
  const columns = [
    { label: 'Delivery tag', key: 'delivery_tag', num: true, render: u => fmtNumber(u.delivery_tag) },
    { label: 'Consumer tag', key: 'consumer_tag', render: u => u.consumer_tag },
    { label: 'Unacked for', key: 'unacked_for_seconds', num: true, render: u => u.unacked_for_seconds === null ? '–' : `${fmtNumber(u.unacked_for_seconds)} s` },
    { label: 'Channel', key: 'channel_name', render: u => nameLink(channelHref(u.channel_name), u.channel_name) }
  ]
  const table = new Table({ id: 'unacked-table', path: () => `api/queues/${enc(vhost)}/${enc(name)}/unacked`, columns, sort: 'delivery_tag', filter: false, empty: 'No unacked messages.' })
  clear(main, h('h1', null, 'Unacked messages', h('small', null, 'of queue ', nameLink(queueHref(vhost, name), name), ` in vhost ${vhost}`)),
    card(null, table.el))
  await table.refresh()
  return { refresh: () => table.refresh() }
}
