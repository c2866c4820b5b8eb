// The nodes (LavinMQ's nodes page): a single broker shows itself; a
// cluster's leader shows itself and its followers, whether each is in the
// in-sync replica set (ISR: the nodes that may take over without losing a
// confirmed message) and how many bytes of replication it has not
// acknowledged yet. Every node has one name (lavinmq@<host>), in the table
// and in the ISR line alike; its id is the name's tooltip. Then this node's resources (memory and its alarm, file
// descriptors, disk and its alarm), version, and for administrators the
// garbage collector's figures and a collection.
import { h, clear, card, stat, props, fmtBytes, fmtDuration, fmtNumber, badge, toast } from '../dom.js'
import { get, post, hasTag } from '../api.js'

function cell (v) { return h('td', null, v === null || v === undefined ? '–' : v) }

export async function render ({ main }) {
  const tbody = h('tbody')
  const summary = h('p', { class: 'muted' })
  const stats = h('div', { class: 'stats', id: 'node-stats' })
  const details = h('div', { id: 'node-details' })
  const gc = h('div', { id: 'node-gc' })
  const admin = hasTag('administrator')

  async function refresh () {
    const nodes = await get('api/nodes')
    const leader = nodes[0]
    summary.textContent = leader.role
      ? `A cluster of ${nodes.length} nodes; ${nodes.filter(n => n.in_isr).length} in sync (ISR: ${(leader.isr || []).join(', ')}).`
      : 'A single node (no clustering).'
    clear(tbody, nodes.map(n => h('tr', { class: 'node', dataset: { role: n.role || 'single' } },
      h('td', { class: 'name', title: n.cluster_node_id ? `node id ${n.cluster_node_id}` : null }, n.name),
      cell(n.role ? badge(n.role, n.role === 'leader' ? 'ok' : null) : 'single'),
      cell(n.uri),
      cell(n.role ? (n.in_isr ? badge('in sync', 'ok') : badge('out of sync', 'warn')) : null),
      cell(n.role === 'leader' ? 'leading' : (n.state || (n.running ? 'running' : 'down'))),
      h('td', { class: 'num' }, n.role === 'follower' && n.lag_in_bytes !== null ? fmtBytes(n.lag_in_bytes) : '–'),
      h('td', { class: 'num' }, n.uptime ? fmtDuration(n.uptime) : '–'),
      h('td', { class: 'num' }, n.mem_used ? fmtBytes(n.mem_used) : '–'),
      h('td', { class: 'num' }, n.fd_used !== undefined ? fmtNumber(n.fd_used) : '–'))))
    // this node
    const alarm = (on) => on ? ' (alarm)' : ''
    clear(stats, stat('Uptime', fmtDuration(leader.uptime)), stat('Memory', fmtBytes(leader.mem_used) + alarm(leader.mem_alarm)),
      stat('File descriptors', `${fmtNumber(leader.fd_used)} / ${fmtNumber(leader.fd_total)}`),
      stat('Disk free', fmtBytes(leader.disk_free) + alarm(leader.disk_free_alarm)), stat('Processors', fmtNumber(leader.processors)))
    const app = (leader.applications || [])[0] || {}
    clear(details, props([['Name', leader.name], ['Version', app.version], ['Process id', leader.os_pid],
      ['Memory limit', leader.mem_limit ? fmtBytes(leader.mem_limit) : undefined],
      ['Disk free limit', fmtBytes(leader.disk_free_limit)]]))
    if (admin) {
      const g = await get('api/nodes/gc_stats')
      clear(gc, props([['Collections', fmtNumber(g.gc_no)], ['Heap', g.heap_size !== undefined ? fmtBytes(g.heap_size) : undefined],
        ['Heap free', g.free_bytes !== undefined ? fmtBytes(g.free_bytes) : undefined], ['Resident', fmtBytes(g.rss_bytes)],
        ['Tracked objects per generation', (g.tracked_objects || []).map(fmtNumber).join(' / ')]]))
    }
  }
  const parts = [h('h1', null, 'Nodes'),
    card(null, summary, h('div', { class: 'table-wrap' }, h('table', { id: 'nodes-table' },
      h('thead', null, h('tr', null, ['Node', 'Role', 'URI', 'ISR', 'State', 'Lag', 'Uptime', 'Memory', 'File descriptors']
        .map((t, i) => h('th', { class: i >= 5 ? 'num' : null }, t)))), tbody))),
    h('h2', null, 'This node'), stats, card('Details', details)]
  if (admin) {
    parts.push(card('Garbage collection', gc, h('div', { class: 'actions' }, h('button', {
      class: 'secondary', id: 'gc-collect',
      onclick: async () => {
        try { await post('api/nodes/gc_collect'); toast('Garbage collected.'); await refresh() } catch (e) { toast(e.message, 'error') }
      }
    }, 'Collect garbage'))))
  }
  clear(main, ...parts)
  await refresh()
  return { refresh }
}
