// Policies and operator policies: the list, add or replace one, delete.
import { h, clear, argsList, toast, card } from '../dom.js'
import { get, put, del, enc } from '../api.js'
import { Table } from '../table.js'
import { field, input, select, ArgsEditor, onSubmit, confirmed } from '../forms.js'
import { listPath } from './common.js'

const POLICY_KEYS = [['max-length', 'number'], ['max-length-bytes', 'number'], ['overflow', 'string'],
  ['message-ttl', 'number'], ['expires', 'number'], ['dead-letter-exchange', 'string'],
  ['dead-letter-routing-key', 'string'], ['delivery-limit', 'number'], ['alternate-exchange', 'string'],
  ['federation-upstream', 'string'], ['federation-upstream-set', 'string']]
const OPERATOR_KEYS = [['max-length', 'number'], ['max-length-bytes', 'number'], ['message-ttl', 'number'],
  ['expires', 'number'], ['delivery-limit', 'number'], ['overflow', 'string']]

export async function render ({ main, vhost, route }) {
  const operator = route === 'operator-policies'
  const api = operator ? 'api/operator-policies' : 'api/policies'
  const title = operator ? 'Operator policies' : 'Policies'
  let table = null
  const columns = [
    ...(vhost ? [] : [{ label: 'Vhost', key: 'vhost', render: p => p.vhost }]),
    { label: 'Name', key: 'name', cls: 'name', render: p => p.name },
    { label: 'Pattern', key: 'pattern', render: p => h('span', { class: 'mono' }, p.pattern) },
    { label: 'Apply to', key: 'apply-to', render: p => p['apply-to'] },
    { label: 'Definition', render: p => argsList(p.definition) },
    { label: 'Priority', key: 'priority', num: true, render: p => String(p.priority) },
    {
      label: '',
      render: p => h('button', {
        class: 'secondary small delete-policy',
        onclick: async () => {
          if (!confirmed(`Delete the policy ${p.name}?`)) return
          try { await del(`${api}/${enc(p.vhost)}/${enc(p.name)}`); toast(`Policy ${p.name} deleted.`); await table.refresh() } catch (e) { toast(e.message, 'error') }
        }
      }, 'Delete')
    }
  ]
  table = new Table({ id: 'policies-table', path: () => listPath(api, vhost), columns, sort: 'name', empty: 'No policies.' })
  const vhosts = (await get('api/vhosts?columns=name')).map(v => v.name)
  const definition = new ArgsEditor({ name: 'definition', suggestions: operator ? OPERATOR_KEYS : POLICY_KEYS })
  const applyTo = operator ? [['queues', 'Queues']] : [['all', 'Exchanges and queues'], ['queues', 'Queues'], ['exchanges', 'Exchanges']]
  const form = h('form', { class: 'form-grid', id: 'add-policy' },
    field('Virtual host', select('vhost', vhosts, vhost || vhosts[0])),
    field('Name', input('name', { required: true })),
    field('Pattern', input('pattern', { required: true, placeholder: '^orders\\.' }), 'A regular expression matched against queue and exchange names.'),
    field('Apply to', select('apply-to', applyTo, applyTo[0][0])),
    field('Priority', input('priority', { type: 'number', value: 0 })),
    field('Definition', definition.el),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Add or update policy')))
  onSubmit(form, async (data) => {
    const name = data.get('name')
    await put(`${api}/${enc(data.get('vhost'))}/${enc(name)}`, {
      pattern: data.get('pattern'), 'apply-to': data.get('apply-to'), priority: Number(data.get('priority') || 0),
      definition: definition.value()
    })
    toast(`Policy ${name} saved.`)
    form.reset(); definition.reset()
    await table.refresh()
  })
  clear(main, h('h1', null, title),
    operator ? h('p', { class: 'muted' }, 'Operator policies limit queues whatever the users\' own policies say; where both set a limit, the lower one applies.') : null,
    card(null, table.el), card(`Add or update a${operator ? 'n operator' : ''} policy`, form))
  await table.refresh()
  return { refresh: () => table.refresh() }
}
