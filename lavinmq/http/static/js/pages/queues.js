// Queues: the paged, sortable, filterable list with rates, and a form to
// add one.
import { h, clear, fmtNumber, fmtRate, toast, card } from '../dom.js'
import { get, put, enc } from '../api.js'
import { Table } from '../table.js'
import { field, input, select, ArgsEditor, onSubmit, QUEUE_ARGS } from '../forms.js'
import { listPath, queueHref, nameLink, features, stateBadge } from './common.js'

export async function render ({ main, vhost }) {
  const columns = [
    ...(vhost ? [] : [{ label: 'Vhost', key: 'vhost', render: q => q.vhost }]),
    { label: 'Name', key: 'name', cls: 'name', render: q => nameLink(queueHref(q.vhost, q.name, q.type), q.name) },
    { label: 'Type', key: 'type', render: q => q.type },
    { label: 'Features', render: features },
    { label: 'Policy', render: q => q.policy || '' },
    { label: 'State', key: 'state', render: q => stateBadge(q.state) },
    { label: 'Ready', key: 'messages_ready', num: true, render: q => fmtNumber(q.messages_ready) },
    { label: 'Unacked', key: 'messages_unacknowledged', num: true, render: q => fmtNumber(q.messages_unacknowledged) },
    { label: 'Total', key: 'messages', num: true, render: q => fmtNumber(q.messages) },
    { label: 'Publish', key: 'message_stats.publish_details.rate', num: true, render: q => fmtRate((q.message_stats || {}).publish_details) },
    { label: 'Deliver/get', key: 'message_stats.deliver_get_details.rate', num: true, render: q => fmtRate((q.message_stats || {}).deliver_get_details) },
    { label: 'Ack', key: 'message_stats.ack_details.rate', num: true, render: q => fmtRate((q.message_stats || {}).ack_details) },
    { label: 'Consumers', key: 'consumers', num: true, render: q => fmtNumber(q.consumers) }
  ]
  const table = new Table({ id: 'queues-table', path: () => listPath('api/queues', vhost), columns, sort: 'name', empty: 'No queues.' })

  const vhosts = (await get('api/vhosts?columns=name')).map(v => v.name)
  const args = new ArgsEditor({ suggestions: QUEUE_ARGS })
  const form = h('form', { class: 'form-grid', id: 'add-queue' },
    ...field('Virtual host', select('vhost', vhosts, vhost || vhosts[0])),
    ...field('Name', input('name', { required: true, maxlength: 255 })),
    ...field('Durable', select('durable', [['true', 'Durable'], ['false', 'Transient']], 'true')),
    ...field('Auto delete', select('auto_delete', [['false', 'No'], ['true', 'Yes']], 'false')),
    ...field('Arguments', args.el),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Add queue')))
  onSubmit(form, async (data) => {
    const name = data.get('name')
    await put(`api/queues/${enc(data.get('vhost'))}/${enc(name)}`, {
      durable: data.get('durable') === 'true', auto_delete: data.get('auto_delete') === 'true', arguments: args.value()
    })
    toast(`Queue ${name} added.`)
    form.reset(); args.reset()
    await table.refresh()
  })
  clear(main, h('h1', null, 'Queues'), card(null, table.el),
    h('details', { class: 'card', id: 'add-queue-box' }, h('summary', null, 'Add a queue'), form))
  await table.refresh()
  return { refresh: () => table.refresh() }
}
