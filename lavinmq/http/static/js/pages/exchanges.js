// Exchanges: the paged list with rates, and a form to add one.
import { h, clear, fmtRate, fmtNumber, fmtBytes, toast, card } from '../dom.js'
import { get, put, enc } from '../api.js'
import { Table } from '../table.js'
import { field, input, select, ArgsEditor, onSubmit, EXCHANGE_ARGS } from '../forms.js'
import { listPath, exchangeHref, nameLink, features } from './common.js'

export async function render ({ main, vhost }) {
  const columns = [
    ...(vhost ? [] : [{ label: 'Vhost', key: 'vhost', render: x => x.vhost }]),
    { label: 'Name', key: 'name', cls: 'name', render: x => nameLink(exchangeHref(x.vhost, x.name), x.name) },
    { label: 'Type', key: 'type', render: x => x.type },
    { label: 'Features', render: features },
    // persistent exchanges: the messages they keep
    { label: 'Stored', key: 'persist.messages', num: true, render: x => x.persist ? `${fmtNumber(x.persist.messages)} (${fmtBytes(x.persist.bytes)})` : '–' },
    { label: 'Publish in', key: 'message_stats.publish_in_details.rate', num: true, render: x => fmtRate((x.message_stats || {}).publish_in_details) },
    { label: 'Publish out', key: 'message_stats.publish_out_details.rate', num: true, render: x => fmtRate((x.message_stats || {}).publish_out_details) }
  ]
  const table = new Table({ id: 'exchanges-table', path: () => listPath('api/exchanges', vhost), columns, sort: 'name', empty: 'No exchanges.' })
  const [vhosts, overview] = await Promise.all([get('api/vhosts?columns=name'), get('api/overview')])
  const types = (overview.exchange_types || []).map(t => t.name)
  const args = new ArgsEditor({ suggestions: EXCHANGE_ARGS })
  const names = vhosts.map(v => v.name)
  // every type the broker declares (/api/overview exchange_types); a delayed
  // exchange needs the type it routes as, x-delayed-type: offered at once
  const typeSelect = select('type', types.length ? types : ['direct', 'fanout', 'topic', 'headers'], 'direct')
  typeSelect.addEventListener('change', () => {
    const keys = [...args.el.querySelectorAll('.k')].map(k => k.value.trim())
    if (typeSelect.value === 'x-delayed-message' && !keys.includes('x-delayed-type')) args.add('x-delayed-type', '', 'string')
  })
  const form = h('form', { class: 'form-grid', id: 'add-exchange' },
    field('Virtual host', select('vhost', names, vhost || names[0])),
    field('Name', input('name', { required: true, maxlength: 255 })),
    field('Type', typeSelect),
    field('Durable', select('durable', [['true', 'Durable'], ['false', 'Transient']], 'true')),
    field('Auto delete', select('auto_delete', [['false', 'No'], ['true', 'Yes']], 'false')),
    field('Internal', select('internal', [['false', 'No'], ['true', 'Yes']], 'false')),
    field('Arguments', args.el),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Add exchange')))
  onSubmit(form, async (data) => {
    const name = data.get('name')
    await put(`api/exchanges/${enc(data.get('vhost'))}/${enc(name)}`, {
      type: data.get('type'), durable: data.get('durable') === 'true', auto_delete: data.get('auto_delete') === 'true',
      internal: data.get('internal') === 'true', arguments: args.value()
    })
    toast(`Exchange ${name} added.`)
    form.reset(); args.reset()
    await table.refresh()
  })
  clear(main, h('h1', null, 'Exchanges'), card(null, table.el),
    h('details', { class: 'card' }, h('summary', null, 'Add an exchange'), form))
  await table.refresh()
  return { refresh: () => table.refresh() }
}
