// The broker's recent log (administrators), newest first; polled for new
// lines, and downloadable as text.
import { h, clear, card } from '../dom.js'
import { get } from '../api.js'

export async function render ({ main }) {
  const tbody = h('tbody')
  let seq = 0
  const rows = []
  const download = h('button', {
    class: 'secondary', id: 'download-log',
    onclick: async () => {
      const text = await get('api/logs')
      const url = URL.createObjectURL(new window.Blob([text], { type: 'text/plain' }))
      const a = h('a', { href: url, download: 'lavinmq.log' })
      document.body.append(a); a.click(); a.remove()
      setTimeout(() => URL.revokeObjectURL(url), 10000)
    }
  }, 'Download log')
  async function refresh () {
    const fresh = await get(`api/logs?after=${seq}`)
    for (const r of fresh) {
      seq = Math.max(seq, r.seq)
      rows.unshift(h('tr', { class: 'level-' + r.level.toLowerCase() }, h('td', null, r.timestamp), h('td', null, r.level),
        h('td', null, r.logger), h('td', null, h('pre', null, r.message))))
    }
    rows.splice(1000)
    if (fresh.length) clear(tbody, rows)
    if (!rows.length) clear(tbody, h('tr', null, h('td', { colspan: 4, class: 'empty' }, 'Nothing logged yet.')))
  }
  clear(main, h('h1', null, 'Log'),
    card(null, h('div', { class: 'table-tools' }, h('span', { class: 'muted' }, 'The last 1,000 lines the broker logged, newest first.'), h('span', { class: 'spacer' }), download),
      h('div', { class: 'table-wrap' }, h('table', { class: 'log-table' },
        h('thead', null, h('tr', null, ['Time', 'Level', 'Source', 'Message'].map(t => h('th', null, t)))), tbody))))
  await refresh()
  return { refresh }
}
