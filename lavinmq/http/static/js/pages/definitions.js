// Definitions (administrators): export as a file download, import from
// an uploaded file.
import { h, clear, toast, card } from '../dom.js'
import { get, post, enc } from '../api.js'
import { field, select, onSubmit } from '../forms.js'

export async function render ({ main, vhost }) {
  const vhosts = (await get('api/vhosts?columns=name')).map(v => v.name)
  const options = [['', 'All (users, vhosts, permissions too)'], ...vhosts.map(v => [v, v])]
  const exportForm = h('form', { class: 'form-grid', id: 'export-definitions' },
    field('Virtual host', select('vhost', options, vhost || '')),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Download definitions')))
  onSubmit(exportForm, async (data) => {
    const v = data.get('vhost')
    const defs = await get(v ? `api/definitions/${enc(v)}` : 'api/definitions')
    const blob = new window.Blob([JSON.stringify(defs, null, 2)], { type: 'application/json' })
    const url = URL.createObjectURL(blob)
    const stamp = new Date().toISOString().slice(0, 10)
    const a = h('a', { href: url, download: `lavinmq-definitions${v ? '-' + v.replace(/[^\w.-]+/g, '_') : ''}-${stamp}.json` })
    document.body.append(a)
    a.click()
    a.remove()
    setTimeout(() => URL.revokeObjectURL(url), 10000)
  })
  const file = h('input', { type: 'file', name: 'file', accept: '.json,application/json', required: true })
  const importForm = h('form', { class: 'form-grid', id: 'import-definitions' },
    field('Definitions file', file, 'JSON exported from this broker, LavinMQ or RabbitMQ.'),
    field('Into virtual host', select('vhost', options, '')),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Upload definitions')))
  onSubmit(importForm, async (data) => {
    const f = file.files[0]
    if (!f) throw new Error('Choose a file first.')
    let body
    try { body = JSON.parse(await f.text()) } catch (e) { throw new Error(`${f.name} is not JSON: ${e.message}`) }
    const v = data.get('vhost')
    await post(v ? `api/definitions/${enc(v)}` : 'api/definitions', body)
    toast(`Definitions from ${f.name} imported.`)
    importForm.reset()
  })
  clear(main, h('h1', null, 'Definitions'),
    h('div', { class: 'grid-2' }, card('Export', exportForm), card('Import', importForm)))
  return {}
}
