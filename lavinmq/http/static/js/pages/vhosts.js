// Virtual hosts (administrators): the list with message counts and rates,
// and a form to add one.
import { h, clear, fmtNumber, fmtRate, toast, card } from '../dom.js'
import { put, enc } from '../api.js'
import { Table } from '../table.js'
import { field, input, onSubmit } from '../forms.js'
import { vhostHref, nameLink } from './common.js'

export async function render ({ main }) {
  const columns = [
    { label: 'Name', key: 'name', cls: 'name', render: v => nameLink(vhostHref(v.name), v.name) },
    { label: 'Ready', key: 'messages_ready', num: true, render: v => fmtNumber(v.messages_ready) },
    { label: 'Unacked', key: 'messages_unacknowledged', num: true, render: v => fmtNumber(v.messages_unacknowledged) },
    { label: 'Total', key: 'messages', num: true, render: v => fmtNumber(v.messages) },
    { label: 'Publish', num: true, render: v => fmtRate((v.message_stats || {}).publish_details) },
    { label: 'Deliver', num: true, render: v => fmtRate((v.message_stats || {}).deliver_details) },
    { label: 'Limits', render: v => Object.entries(v.limits || {}).map(([k, x]) => `${k}: ${x}`).join(', ') || '–' }
  ]
  const table = new Table({ id: 'vhosts-table', path: () => 'api/vhosts', columns, sort: 'name', empty: 'No vhosts.' })
  const form = h('form', { class: 'form-grid', id: 'add-vhost' },
    field('Name', input('name', { required: true })),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Add virtual host')))
  onSubmit(form, async (data) => {
    const name = data.get('name')
    await put(`api/vhosts/${enc(name)}`)
    toast(`Virtual host ${name} added; you have full permissions on it.`)
    form.reset()
    await table.refresh()
  })
  clear(main, h('h1', null, 'Virtual hosts'), card(null, table.el), card('Add a virtual host', form))
  await table.refresh()
  return { refresh: () => table.refresh() }
}
