// The nodes (LavinMQ's nodes page): a single broker shows itself; a
// cluster's leader shows itself and its followers, whether each is in the
// in-sync replica set (ISR: the nodes that may take over without losing a
// confirmed message) and how many bytes of replication it has not
// acknowledged yet.
import { h, clear, card, fmtBytes, fmtDuration, fmtNumber, badge } from '../dom.js'
import { get } from '../api.js'

function cell (v) { return h('td', null, v === null || v === undefined ? '–' : v) }

export async function render ({ main }) {
  const tbody = h('tbody')
  const summary = h('p', { class: 'muted' })
  async function refresh () {
    const nodes = await get('api/nodes')
    const leader = nodes[0]
    summary.textContent = leader.role
      ? `A cluster of ${nodes.length} nodes; ${nodes.filter(n => n.in_isr).length} in sync (ISR: ${(leader.isr || []).join(', ')}).`
      : 'A single node (no clustering).'
    clear(tbody, nodes.map(n => h('tr', { class: 'node', dataset: { role: n.role || 'single' } },
      h('td', { class: 'name' }, n.name),
      cell(n.role ? badge(n.role, n.role === 'leader' ? 'ok' : null) : 'single'),
      cell(n.uri),
      cell(n.role ? (n.in_isr ? badge('in sync', 'ok') : badge('out of sync', 'warn')) : null),
      cell(n.role === 'leader' ? 'leading' : (n.state || (n.running ? 'running' : 'down'))),
      h('td', { class: 'num' }, n.role === 'follower' && n.lag_in_bytes !== null ? fmtBytes(n.lag_in_bytes) : '–'),
      h('td', { class: 'num' }, n.uptime ? fmtDuration(n.uptime) : '–'),
      h('td', { class: 'num' }, n.mem_used ? fmtBytes(n.mem_used) : '–'),
      h('td', { class: 'num' }, n.fd_used !== undefined ? fmtNumber(n.fd_used) : '–'))))
  }
  clear(main, h('h1', null, 'Nodes'),
    card(null, summary, h('div', { class: 'table-wrap' }, h('table', { id: 'nodes-table' },
      h('thead', null, h('tr', null, ['Node', 'Role', 'URI', 'ISR', 'State', 'Lag', 'Uptime', 'Memory', 'File descriptors']
        .map((t, i) => h('th', { class: i >= 5 ? 'num' : null }, t)))), tbody))))
  await refresh()
  return { refresh }
}
