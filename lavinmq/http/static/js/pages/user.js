// One user: tags and password (the hash is never fetched), permissions per
// vhost, delete.
import { h, clear, props, toast, card } from '../dom.js'
import { get, put, del, enc, currentUser } from '../api.js'
import { field, input, select, onSubmit, confirmed } from '../forms.js'
import { escapeRegex, vhostHref, nameLink, Guard } from './common.js'
import { tagsInput } from './users.js'

export async function render ({ main, params, navigate }) {
  const [name] = params
  const guard = new Guard()
  const details = h('div', { id: 'user-details' })
  const perms = h('div', { class: 'table-wrap', id: 'user-permissions' })
  const [vhosts, found] = await Promise.all([get('api/vhosts?columns=name'),
    get(`api/users?columns=name,tags&use_regex=true&name=${enc('^' + escapeRegex(name) + '$')}`)])
  if (!found.length) {
    clear(main, h('h1', null, name), h('p', null, 'No such user. ', h('a', { href: '#/users' }, 'Back to users.')))
    return {}
  }
  const tags = tagsInput((found[0].tags || []).join(', '))
  const editForm = h('form', { class: 'form-grid', id: 'edit-user' },
    field('Tags', tags.box),
    field('New password', input('password', { type: 'password', autocomplete: 'new-password' }), 'Leave empty to keep the current password.'),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Update user')))
  onSubmit(editForm, async (data) => {
    const body = { tags: data.get('tags') }
    if (data.get('password')) body.password = data.get('password')
    await put(`api/users/${enc(name)}`, body)
    toast(`User ${name} updated.`)
    editForm.querySelector('input[name=password]').value = ''
    await refresh()
  })
  const names = vhosts.map(v => v.name)
  const permForm = h('form', { class: 'form-grid', id: 'set-permission' },
    field('Virtual host', select('vhost', names, names[0])),
    field('Configure regexp', input('configure', { value: '.*' })),
    field('Write regexp', input('write', { value: '.*' })),
    field('Read regexp', input('read', { value: '.*' })),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Set permission')))
  onSubmit(permForm, async (data) => {
    await put(`api/permissions/${enc(data.get('vhost'))}/${enc(name)}`,
      { configure: data.get('configure'), write: data.get('write'), read: data.get('read') })
    toast('Permission set.')
    await refresh()
  })

  async function refresh () {
    return guard.refresh(async () => {
      const [u, ps] = await Promise.all([
        get(`api/users?columns=name,tags&use_regex=true&name=${enc('^' + escapeRegex(name) + '$')}`),
        get(`api/users/${enc(name)}/permissions`)])
      clear(details, props([['Name', name], ['Tags', ((u[0] || {}).tags || []).join(', ') || 'none']]))
      clear(perms, ps.length
        ? h('table', null, h('thead', null, h('tr', null, ['Virtual host', 'Configure', 'Write', 'Read', ''].map(t => h('th', null, t)))),
          h('tbody', null, ps.map(p => h('tr', null, h('td', null, nameLink(vhostHref(p.vhost), p.vhost)),
            h('td', { class: 'mono' }, p.configure), h('td', { class: 'mono' }, p.write), h('td', { class: 'mono' }, p.read),
            h('td', null, h('button', {
              class: 'secondary small clear-permission',
              onclick: async () => {
                try { await del(`api/permissions/${enc(p.vhost)}/${enc(name)}`); toast('Permission cleared.'); await refresh() } catch (e) { toast(e.message, 'error') }
              }
            }, 'Clear'))))))
        : h('p', { class: 'muted' }, 'No permissions: this user can use no vhost.'))
    })
  }
  const me = currentUser()
  const deleteButton = h('button', {
    class: 'danger', id: 'delete',
    onclick: async () => {
      const self = me && me.name === name
      if (!confirmed(self ? `Delete ${name}? That is you: you will be logged out.` : `Delete the user ${name}?`)) return
      try {
        await guard.remove(() => del(`api/users/${enc(name)}`))
        toast(`User ${name} deleted.`)
        navigate('#/users')
      } catch (e) { toast(e.message, 'error') }
    }
  }, 'Delete user')
  clear(main, h('h1', null, name, h('small', null, 'user')),
    h('div', { class: 'grid-2' }, card('Details', details), card('Edit', editForm)),
    card('Permissions', perms, h('h2', null, 'Set a permission'), permForm),
    card('Actions', deleteButton))
  await refresh()
  return { refresh, destroy () { guard.gone = true } }
}
