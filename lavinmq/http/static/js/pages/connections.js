// Client connections: the paged list with data rates.
import { h, clear, fmtNumber, fmtBytes, card } from '../dom.js'
import { Table } from '../table.js'
import { connectionHref, nameLink, stateBadge } from './common.js'

export function clientName (c) {
  if (c.client_id !== undefined) return c.client_id || '–'     // MQTT: the client id, as LavinMQ shows it
  const p = c.client_properties || {}
  return [p.product, p.version].filter(Boolean).join(' ') || '–'
}

export async function render ({ main, vhost }) {
  const base = vhost ? `api/vhosts/${encodeURIComponent(vhost)}/connections` : 'api/connections'
  const columns = [
    { label: 'Name', key: 'name', cls: 'name', render: c => nameLink(connectionHref(c.name), c.name) },
    // what the client calls it (its connection_name client property), as RabbitMQ's UI shows it
    { label: 'Client-provided name', key: 'user_provided_name', cls: 'provided-name', render: c => c.user_provided_name || '–' },
    ...(vhost ? [] : [{ label: 'Vhost', key: 'vhost', render: c => c.vhost }]),
    { label: 'User', key: 'user', render: c => c.user },
    { label: 'State', key: 'state', render: c => stateBadge(c.state) },
    { label: 'Client', render: clientName },
    { label: 'Protocol', key: 'protocol', render: c => c.protocol + (c.transport === 'websocket' ? ' (WebSocket)' : '') },
    { label: 'Channels', key: 'channels', num: true, render: c => fmtNumber(c.channels) },
    { label: 'Received', key: 'recv_oct_details.rate', num: true, render: c => fmtBytes((c.recv_oct_details || {}).rate) + '/s' },
    { label: 'Sent', key: 'send_oct_details.rate', num: true, render: c => fmtBytes((c.send_oct_details || {}).rate) + '/s' }
  ]
  const table = new Table({ id: 'connections-table', path: () => base, columns, sort: 'name', empty: 'No connections.' })
  clear(main, h('h1', null, 'Connections'), card(null, table.el))
  await table.refresh()
  return { refresh: () => table.refresh() }
}

