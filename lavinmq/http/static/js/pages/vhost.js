// One virtual host: counts, limits (max-connections, max-queues),
// permissions of users on it, delete.
import { h, clear, stat, fmtNumber, fmtRate, toast, card } from '../dom.js'
import { get, put, del, enc } from '../api.js'
import { field, input, select, onSubmit, confirmed } from '../forms.js'
import { userHref, nameLink, Guard } from './common.js'

const LIMITS = [['max-connections', 'Max connections'], ['max-queues', 'Max queues']]

export async function render ({ main, params, navigate }) {
  const [name] = params
  const base = `api/vhosts/${enc(name)}`
  const guard = new Guard()
  const stats = h('div', { class: 'stats', id: 'vhost-stats' })
  const limits = h('div', { class: 'table-wrap', id: 'vhost-limits' })
  const perms = h('div', { class: 'table-wrap', id: 'vhost-permissions' })
  const users = await get('api/users?columns=name')
  const limitForm = h('form', { class: 'form-grid', id: 'set-limit' },
    field('Limit', select('limit', LIMITS, 'max-connections')),
    field('Value', input('value', { type: 'number', min: 0, required: true })),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Set limit')))
  onSubmit(limitForm, async (data) => {
    await put(`api/vhost-limits/${enc(name)}/${enc(data.get('limit'))}`, { value: Number(data.get('value')) })
    toast('Limit set.')
    limitForm.reset()
    await refresh()
  })
  const permForm = h('form', { class: 'form-grid', id: 'set-permission' },
    field('User', select('user', users.map(u => u.name), users.length ? users[0].name : '')),
    field('Configure regexp', input('configure', { value: '.*' })),
    field('Write regexp', input('write', { value: '.*' })),
    field('Read regexp', input('read', { value: '.*' })),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Set permission')))
  onSubmit(permForm, async (data) => {
    await put(`api/permissions/${enc(name)}/${enc(data.get('user'))}`,
      { configure: data.get('configure'), write: data.get('write'), read: data.get('read') })
    toast('Permission set.')
    await refresh()
  })

  async function refresh () {
    return guard.refresh(async () => {
      const [v, ps] = await Promise.all([get(base), get(`${base}/permissions`)])
      clear(stats, stat('Ready', fmtNumber(v.messages_ready)), stat('Unacked', fmtNumber(v.messages_unacknowledged)),
        stat('Total', fmtNumber(v.messages)), stat('Publish', fmtRate((v.message_stats || {}).publish_details)),
        stat('Deliver', fmtRate((v.message_stats || {}).deliver_details)))
      const entries = Object.entries(v.limits || {})
      clear(limits, entries.length
        ? h('table', null, h('thead', null, h('tr', null, ['Limit', 'Value', ''].map(t => h('th', null, t)))),
          h('tbody', null, entries.map(([k, x]) => h('tr', null, h('td', null, k), h('td', { class: 'num' }, fmtNumber(x)),
            h('td', null, h('button', {
              class: 'secondary small remove-limit',
              onclick: async () => {
                try { await del(`api/vhost-limits/${enc(name)}/${enc(k)}`); toast('Limit removed.'); await refresh() } catch (e) { toast(e.message, 'error') }
              }
            }, 'Remove'))))))
        : h('p', { class: 'muted' }, 'No limits.'))
      clear(perms, ps.length
        ? h('table', null, h('thead', null, h('tr', null, ['User', 'Configure', 'Write', 'Read', ''].map(t => h('th', null, t)))),
          h('tbody', null, ps.map(p => h('tr', null, h('td', null, nameLink(userHref(p.user), p.user)),
            h('td', { class: 'mono' }, p.configure), h('td', { class: 'mono' }, p.write), h('td', { class: 'mono' }, p.read),
            h('td', null, h('button', {
              class: 'secondary small clear-permission',
              onclick: async () => {
                try { await del(`api/permissions/${enc(name)}/${enc(p.user)}`); toast('Permission cleared.'); await refresh() } catch (e) { toast(e.message, 'error') }
              }
            }, 'Clear'))))))
        : h('p', { class: 'muted' }, 'No user may use this vhost.'))
    })
  }
  const deleteButton = h('button', {
    class: 'danger', id: 'delete',
    onclick: async () => {
      if (!confirmed(`Delete the virtual host ${name} with all its queues, exchanges and messages?`)) return
      try {
        await guard.remove(() => del(base))
        window.sessionStorage.removeItem('lavinmq.vhost')
        toast(`Virtual host ${name} deleted.`)
        navigate('#/vhosts')
      } catch (e) { toast(e.message, 'error') }
    }
  }, 'Delete virtual host')
  clear(main, h('h1', null, name, h('small', null, 'virtual host')), stats,
    h('div', { class: 'grid-2' }, card('Limits', limits, h('h2', null, 'Set a limit'), limitForm),
      card('Permissions', perms, h('h2', null, 'Set a permission'), permForm)),
    card('Actions', deleteButton))
  await refresh()
  return { refresh, destroy () { guard.gone = true } }
}
