// Shovels, as LavinMQ's page has them: each shovel with its source,
// destination, settings and state (an error shows its message); pause or
// resume, restart, delete; a form that adds or replaces one (a shovel is a
// `shovel` parameter).
import { h, clear, toast, card, badge } from '../dom.js'
import { get, put, del, enc } from '../api.js'
import { Table } from '../table.js'
import { field, input, select, onSubmit, confirmed } from '../forms.js'
import { listPath } from './common.js'

const STATE_KIND = { running: 'ok', starting: 'warn', paused: 'warn', error: 'bad', terminated: 'bad' }

function endpoint (name, kind, uri) {
  return h('span', null, name === undefined ? '–' : name, h('br'), h('small', { class: 'muted' }, kind, ' at ', h('span', { class: 'mono' }, uri)))
}

export function state (s) {
  const b = badge(s.state, STATE_KIND[s.state])
  if (!s.error) return b
  b.title = s.error
  return h('span', { class: 'shovel-state' }, b, h('div', { class: 'muted error-text' }, s.error))
}

export async function render ({ main, vhost }) {
  let table = null
  const act = (s, verb) => async () => {
    try {
      await put(`api/shovels/${enc(s.vhost)}/${enc(s.name)}/${verb}`)
      toast(`Shovel ${s.name} ${{ pause: 'paused', resume: 'resumed', restart: 'restarted' }[verb]}.`)
      await table.refresh()
    } catch (e) { toast(e.message, 'error') }
  }
  const columns = [
    ...(vhost ? [] : [{ label: 'Vhost', key: 'vhost', render: s => s.vhost }]),
    { label: 'Name', key: 'name', cls: 'name', render: s => s.name },
    { label: 'Source', render: s => s.src_queue !== undefined ? endpoint(s.src_queue, 'queue', s.src_uri) : endpoint(s.src_exchange, 'exchange', s.src_uri) },
    {
      label: 'Destination',
      render: s => s.dest_protocol === 'http' ? endpoint('', 'http', s.dest_uri) : s.dest_queue !== undefined ? endpoint(s.dest_queue, 'queue', s.dest_uri) : endpoint(s.dest_exchange, 'exchange', s.dest_uri)
    },
    { label: 'Ack mode', key: 'ack_mode', render: s => s.ack_mode },
    {
      label: 'Settings',
      render: s => h('small', { class: 'muted' }, `prefetch ${s.src_prefetch_count}`, h('br'),
        `reconnect ${s.reconnect_delay} s`, h('br'), `delete after ${s.src_delete_after}`)
    },
    { label: 'Moved', num: true, key: 'message_count', render: s => String(s.message_count) },
    { label: 'State', key: 'state', render: state },
    {
      label: '',
      render: s => h('div', { class: 'buttons' },
        s.state === 'paused'
          ? h('button', { class: 'secondary small resume-shovel', onclick: act(s, 'resume') }, 'Resume')
          : h('button', { class: 'secondary small pause-shovel', disabled: s.state === 'terminated', onclick: act(s, 'pause') }, 'Pause'),
        h('button', { class: 'secondary small restart-shovel', onclick: act(s, 'restart') }, 'Restart'),
        h('button', {
          class: 'secondary small delete-shovel',
          onclick: async () => {
            if (!confirmed(`Delete the shovel ${s.name}? It cannot be restored.`)) return
            try { await del(`api/parameters/shovel/${enc(s.vhost)}/${enc(s.name)}`); toast(`Shovel ${s.name} deleted.`); await table.refresh() } catch (e) { toast(e.message, 'error') }
          }
        }, 'Delete'))
    }
  ]
  table = new Table({ id: 'shovels-table', path: () => listPath('api/shovels', vhost), columns, sort: 'name', empty: 'No shovels.' })
  const vhosts = (await get('api/vhosts?columns=name')).map(v => v.name)
  const srcType = select('src-type', [['queue', 'Queue'], ['exchange', 'Exchange']], 'queue')
  const destType = select('dest-type', [['queue', 'Queue'], ['exchange', 'Exchange']], 'queue')
  const srcKey = field('Source routing key', input('src-exchange-key', { placeholder: 'for an exchange source' }))
  const destKey = field('Destination routing key', input('dest-exchange-key', { placeholder: 'default: the message\'s own' }))
  const destUri = input('dest-uri', { required: true, placeholder: 'amqp://user:password@host:5672/vhost' })
  const form = h('form', { class: 'form-grid', id: 'add-shovel' },
    field('Virtual host', select('vhost', vhosts, vhost || vhosts[0])),
    field('Name', input('name', { required: true })),
    field('Source URI', input('src-uri', { required: true, value: 'amqp://' }), 'amqp:// alone is this broker. Several URIs: separate them with spaces.'),
    field('Source type', srcType),
    field('Source queue or exchange', input('src-endpoint', { required: true })),
    srcKey,
    field('Prefetch', input('src-prefetch-count', { type: 'number', value: 1000, min: 0 })),
    field('Delete after', select('src-delete-after', [['never', 'Never'], ['queue-length', 'Queue length']], 'never')),
    field('Destination URI', destUri, 'An HTTP or HTTPS URL instead: each message is POSTed there.'),
    field('Destination type', destType),
    field('Destination queue or exchange', input('dest-endpoint')),
    destKey,
    field('Ack mode', select('ack-mode', [['on-confirm', 'On confirm'], ['on-publish', 'On publish'], ['no-ack', 'No ack']], 'on-confirm')),
    field('Reconnect delay (s)', input('reconnect-delay', { type: 'number', value: 5, min: 0 })),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Add or replace shovel')))
  // what reset() goes back to
  form.querySelectorAll('input').forEach(el => { el.defaultValue = el.value })
  onSubmit(form, async (data) => {
    const name = data.get('name').trim()
    const uris = (s) => { const list = s.trim().split(/\s+/); return list.length === 1 ? list[0] : list }
    const value = {
      'src-uri': uris(data.get('src-uri')),
      'dest-uri': uris(data.get('dest-uri')),
      'src-prefetch-count': Number(data.get('src-prefetch-count') || 0),
      'src-delete-after': data.get('src-delete-after'),
      'ack-mode': data.get('ack-mode'),
      'reconnect-delay': Number(data.get('reconnect-delay') || 0)
    }
    if (data.get('src-type') === 'queue') value['src-queue'] = data.get('src-endpoint')
    else {
      value['src-exchange'] = data.get('src-endpoint')
      if (data.get('src-exchange-key')) value['src-exchange-key'] = data.get('src-exchange-key')
    }
    const dest = data.get('dest-endpoint')
    if (dest) {
      if (data.get('dest-type') === 'queue') value['dest-queue'] = dest
      else {
        value['dest-exchange'] = dest
        if (data.get('dest-exchange-key')) value['dest-exchange-key'] = data.get('dest-exchange-key')
      }
    }
    await put(`api/parameters/shovel/${enc(data.get('vhost'))}/${enc(name)}`, { value })
    toast(`Shovel ${name} saved.`)
    form.reset()
    await table.refresh()
  })
  clear(main, h('h1', null, 'Shovels'),
    h('p', { class: 'muted' }, 'A shovel moves messages from a queue or exchange to a queue, an exchange or an HTTP endpoint, here or on another broker.'),
    card(null, table.el), card('Add or replace a shovel', form))
  await table.refresh()
  return { refresh: () => table.refresh() }
}
