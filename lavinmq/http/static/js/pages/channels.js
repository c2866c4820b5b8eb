// Channels: the paged list with message rates.
import { h, clear, fmtNumber, fmtRate, card } from '../dom.js'
import { Table } from '../table.js'
import { channelHref, connectionHref, nameLink, stateBadge } from './common.js'

export function mode (ch) {
  return [ch.confirm ? 'C' : '', ch.transactional ? 'T' : ''].filter(Boolean).join(' ') || '–'
}

export async function render ({ main, vhost }) {
  const base = vhost ? `api/vhosts/${encodeURIComponent(vhost)}/channels` : 'api/channels'
  const rate = k => ch => fmtRate((ch.message_stats || {})[k + '_details'])
  const columns = [
    { label: 'Channel', key: 'name', cls: 'name', render: ch => nameLink(channelHref(ch.name), ch.name) },
    { label: 'Connection', render: ch => nameLink(connectionHref(ch.connection_details.name), ch.connection_details.name) },
    ...(vhost ? [] : [{ label: 'Vhost', key: 'vhost', render: ch => ch.vhost }]),
    { label: 'User', key: 'user', render: ch => ch.user },
    { label: 'Mode', render: mode },
    { label: 'State', render: ch => stateBadge(ch.state) },
    { label: 'Prefetch', key: 'prefetch_count', num: true, render: ch => fmtNumber(ch.prefetch_count) },
    { label: 'Unacked', key: 'messages_unacknowledged', num: true, render: ch => fmtNumber(ch.messages_unacknowledged) },
    { label: 'Consumers', key: 'consumer_count', num: true, render: ch => fmtNumber(ch.consumer_count) },
    { label: 'Publish', num: true, render: rate('publish') },
    { label: 'Deliver', num: true, render: rate('deliver') },
    { label: 'Ack', num: true, render: rate('ack') }
  ]
  const table = new Table({ id: 'channels-table', path: () => base, columns, sort: 'name', empty: 'No channels.' })
  clear(main, h('h1', null, 'Channels'), card(null, table.el))
  await table.refresh()
  return { refresh: () => table.refresh() }
}
