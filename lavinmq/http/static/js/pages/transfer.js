// "Move messages" (a queue's page, as LavinMQ's) and "Copy messages" (a
// stream's page: reading a stream removes nothing) are both a dynamic
// shovel on this broker that deletes itself once it has passed on as many
// messages as the source held when it started (src-delete-after
// queue-length). The URIs name no host and no user: the broker runs a local
// shovel with its own rights, so no password is put in a parameter (an
// OAuth session has none to give).
import { h, toast } from '../dom.js'
import { get, put, enc } from '../api.js'
import { field, input, onSubmit } from '../forms.js'

export function transferForm ({ vhost, name, copy, done }) {
  const listId = copy ? 'copy-destinations' : 'move-destinations'
  const form = h('form', { class: 'form-grid', id: copy ? 'copy-messages' : 'move-messages' },
    field('Destination queue', input('destination', { required: true, list: listId })),
    h('datalist', { id: listId }),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, copy ? 'Copy messages' : 'Move messages')))
  onSubmit(form, async (data) => {
    const dest = data.get('destination').trim()
    if (dest === '' || dest === name) throw new Error('Pick another queue as the destination.')
    const uri = `amqp:///${enc(vhost)}`
    const shovel = `${copy ? 'Copy' : 'Move'} ${name} to ${dest}`
    const value = {
      'src-uri': uri,
      'src-queue': name,
      'dest-uri': uri,
      'dest-queue': dest,
      'src-prefetch-count': 1000,
      'ack-mode': 'on-confirm',
      'src-delete-after': 'queue-length'
    }
    if (copy) value['src-consumer-args'] = { 'x-stream-offset': 'first' }
    await put(`api/parameters/shovel/${enc(vhost)}/${enc(shovel)}`, { value })
    form.reset()
    toast(`${copy ? 'Copying' : 'Moving'} messages to ${dest}.`)
    if (done) await done()
  })
  get(`api/queues/${enc(vhost)}?columns=name`).then(qs => {
    form.querySelector('datalist').replaceChildren(...qs.filter(q => q.name !== name).map(q => h('option', { value: q.name })))
  }).catch(() => {})
  return form
}
