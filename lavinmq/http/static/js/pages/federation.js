// Federation, as LavinMQ's page has it: the upstreams (federation-upstream
// parameters) with a form that adds or replaces one, and the links the
// policies made of them, with their status.
import { h, clear, toast, card, badge } from '../dom.js'
import { get, put, del, enc } from '../api.js'
import { Table } from '../table.js'
import { field, input, select, onSubmit, confirmed } from '../forms.js'
import { listPath } from './common.js'

const STATUS_KIND = { running: 'ok', starting: 'warn', error: 'bad', terminated: 'bad' }

// the password of a URI is not shown
function scrub (uri) { return String(uri).replace(/:([^:@/]+)@/, ':***@') }

function optional (v) { return v === undefined || v === null || v === '' ? '–' : String(v) }

export async function render ({ main, vhost }) {
  let upstreams = null
  const upstreamColumns = [
    ...(vhost ? [] : [{ label: 'Vhost', key: 'vhost', render: u => u.vhost }]),
    { label: 'Name', key: 'name', cls: 'name', render: u => u.name },
    { label: 'URI', render: u => h('span', { class: 'mono' }, [].concat(u.value.uri).map(scrub).join(' ')) },
    {
      label: 'Settings',
      render: u => h('small', { class: 'muted' }, `prefetch ${optional(u.value['prefetch-count'])}`, h('br'),
        `reconnect ${optional(u.value['reconnect-delay'])} s`, h('br'), `${optional(u.value['ack-mode'])}`, h('br'),
        `max hops ${optional(u.value['max-hops'])}`)
    },
    {
      label: 'Upstream names and queue',
      render: u => h('small', { class: 'muted' }, `exchange ${optional(u.value.exchange)}`, h('br'),
        `queue ${optional(u.value.queue)}`, h('br'), `expires ${optional(u.value.expires)}`, h('br'),
        `message TTL ${optional(u.value['message-ttl'])}`)
    },
    {
      label: '',
      render: u => h('button', {
        class: 'secondary small delete-upstream',
        onclick: async () => {
          if (!confirmed(`Delete the upstream ${u.name}? Its links go with it.`)) return
          try { await del(`api/parameters/federation-upstream/${enc(u.vhost)}/${enc(u.name)}`); toast(`Upstream ${u.name} deleted.`); await upstreams.refresh() } catch (e) { toast(e.message, 'error') }
        }
      }, 'Delete')
    }
  ]
  upstreams = new Table({ id: 'upstreams-table', path: () => listPath('api/parameters/federation-upstream', vhost), columns: upstreamColumns, sort: 'name', empty: 'No upstreams.' })
  const linkColumns = [
    ...(vhost ? [] : [{ label: 'Vhost', key: 'vhost', render: l => l.vhost }]),
    { label: 'Upstream', key: 'upstream', render: l => l.upstream },
    { label: 'URI', render: l => h('span', { class: 'mono' }, l.uri) },
    { label: 'Resource', key: 'resource', render: l => h('span', null, l.resource, h('br'), h('small', { class: 'muted' }, l.type)) },
    { label: 'Upstream resource', render: l => l[`upstream_${l.type}`] },
    { label: 'Messages', num: true, render: l => String(l.message_count) },
    {
      label: 'Status',
      key: 'status',
      render: l => {
        const b = badge(l.status, STATUS_KIND[l.status])
        if (!l.error) return b
        b.title = l.error
        return h('span', null, b, h('div', { class: 'muted error-text' }, l.error))
      }
    },
    { label: 'Since', render: l => l.timestamp }
  ]
  const links = new Table({ id: 'links-table', path: () => listPath('api/federation-links', vhost), columns: linkColumns, sort: 'upstream', empty: 'No links: a policy with federation-upstream or federation-upstream-set makes them.' })
  const vhosts = (await get('api/vhosts?columns=name')).map(v => v.name)
  const form = h('form', { class: 'form-grid', id: 'add-upstream' },
    field('Virtual host', select('vhost', vhosts, vhost || vhosts[0])),
    field('Name', input('name', { required: true })),
    field('URI', input('uri', { required: true, placeholder: 'amqp://user:password@host:5672/vhost' })),
    field('Prefetch', input('prefetch-count', { type: 'number', value: 1000, min: 0 })),
    field('Reconnect delay (s)', input('reconnect-delay', { type: 'number', value: 1, min: 0 })),
    field('Ack mode', select('ack-mode', [['on-confirm', 'On confirm'], ['on-publish', 'On publish'], ['no-ack', 'No ack']], 'on-confirm')),
    field('Exchange', input('exchange', { placeholder: 'default: the federated exchange\'s name' })),
    field('Max hops', input('max-hops', { type: 'number', value: 1, min: 1 })),
    field('Expires (ms)', input('expires', { type: 'number', min: 1 })),
    field('Message TTL (ms)', input('message-ttl', { type: 'number', min: 0 })),
    field('Queue', input('queue', { placeholder: 'default: the federated queue\'s name' })),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Add or replace upstream')))
  // what reset() goes back to
  form.querySelectorAll('input').forEach(el => { el.defaultValue = el.value })
  onSubmit(form, async (data) => {
    const name = data.get('name').trim()
    const value = { uri: data.get('uri'), 'ack-mode': data.get('ack-mode') }
    for (const key of ['prefetch-count', 'reconnect-delay', 'max-hops', 'expires', 'message-ttl']) {
      if (data.get(key) !== '') value[key] = Number(data.get(key))
    }
    for (const key of ['exchange', 'queue']) {
      if (data.get(key)) value[key] = data.get(key)
    }
    await put(`api/parameters/federation-upstream/${enc(data.get('vhost'))}/${enc(name)}`, { value })
    toast(`Upstream ${name} saved.`)
    form.reset()
    await upstreams.refresh()
  })
  clear(main, h('h1', null, 'Federation'),
    h('p', { class: 'muted' }, 'Upstreams are brokers to federate from; a policy with the key federation-upstream (one upstream) or federation-upstream-set (a set, or all) makes links for the exchanges and queues it matches.'),
    card('Upstreams', upstreams.el), card('Links', links.el), card('Add or replace an upstream', form))
  await Promise.all([upstreams.refresh(), links.refresh()])
  return { refresh: () => Promise.all([upstreams.refresh(), links.refresh()]) }
}
