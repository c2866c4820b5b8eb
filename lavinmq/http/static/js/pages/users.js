// Users (administrators): the list with tags (never password hashes: the
// list asks only for name and tags) and a form to add one.
import { h, clear, toast, card } from '../dom.js'
import { put, enc } from '../api.js'
import { Table } from '../table.js'
import { field, input, onSubmit } from '../forms.js'
import { userHref, nameLink } from './common.js'

export const TAGS = ['administrator', 'monitoring', 'policymaker', 'management']

export function tagsInput (value = '') {
  const el = input('tags', { value, placeholder: 'e.g. management' })
  const buttons = h('div', { class: 'tag-buttons' }, TAGS.map(t => h('button', {
    type: 'button', class: 'secondary small',
    onclick: () => {
      const tags = el.value.split(',').map(s => s.trim()).filter(Boolean)
      if (!tags.includes(t)) tags.push(t)
      el.value = tags.join(', ')
    }
  }, t)))
  return { el, box: h('div', null, el, buttons) }
}

export async function render ({ main }) {
  const columns = [
    { label: 'Name', key: 'name', cls: 'name', render: u => nameLink(userHref(u.name), u.name) },
    { label: 'Tags', render: u => (u.tags || []).join(', ') || h('span', { class: 'muted' }, 'none (no management access)') }
  ]
  const table = new Table({ id: 'users-table', path: () => 'api/users', columns, sort: 'name', empty: 'No users.' })
  table.url = ((orig) => () => orig.call(table) + '&columns=name,tags')(table.url)
  const tags = tagsInput()
  const form = h('form', { class: 'form-grid', id: 'add-user' },
    field('Username', input('username', { required: true, autocomplete: 'off' })),
    field('Password', input('password', { type: 'password', required: true, autocomplete: 'new-password' })),
    field('Tags', tags.box, 'Comma-separated. management: their own vhosts; policymaker: and policies; monitoring: and every connection and node; administrator: everything.'),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Add user')))
  onSubmit(form, async (data) => {
    const name = data.get('username')
    await put(`api/users/${enc(name)}`, { password: data.get('password'), tags: data.get('tags') })
    toast(`User ${name} added. Give them permissions on a vhost on their page.`)
    form.reset()
    await table.refresh()
  })
  clear(main, h('h1', null, 'Users'), card(null, table.el), card('Add a user', form))
  await table.refresh()
  return { refresh: () => table.refresh() }
}
