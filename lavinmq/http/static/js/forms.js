// Form pieces shared by the pages: labelled fields, an arguments editor
// (typed key/value rows, as RabbitMQ's x-arguments), submit handling and
// the publish-a-message form.
import { h, toast } from './dom.js'
import { post, enc } from './api.js'

export function field (label, input, hint) {
  const id = input.id || ('f-' + Math.random().toString(36).slice(2, 9))
  input.id = id
  return [h('label', { for: id }, label), hint ? h('div', null, input, h('div', { class: 'muted' }, hint)) : input]
}

export function input (name, attrs = {}) { return h('input', { type: 'text', name, ...attrs }) }

export function select (name, options, selected) {
  return h('select', { name }, options.map(o => {
    const [value, text] = Array.isArray(o) ? o : [o, o]
    return h('option', { value, selected: value === selected }, text)
  }))
}

export function checkbox (name, checked) { return h('input', { type: 'checkbox', name, checked }) }

const TYPES = [['string', 'String'], ['number', 'Number'], ['boolean', 'Boolean'], ['list', 'List (JSON)']]

export class ArgsEditor {
  constructor ({ name = 'arguments', suggestions = [] } = {}) {
    this.rows = h('div')
    this.el = h('div', { class: 'args-editor', dataset: { name } }, this.rows)
    if (suggestions.length) {
      this.el.append(h('div', { class: 'tag-buttons' }, suggestions.map(([key, type]) =>
        h('button', { type: 'button', class: 'secondary small', onclick: () => this.add(key, '', type) }, key))))
    }
    this.add()
  }

  add (key = '', value = '', type = 'string') {
    const empty = [...this.rows.children].find(r => !r.querySelector('.k').value && !r.querySelector('.v').value)
    if (empty && key) {
      empty.querySelector('.k').value = key
      empty.querySelector('.t').value = type
      empty.querySelector('.v').focus()
      return
    }
    const row = h('div', { class: 'row' },
      h('input', { type: 'text', class: 'k', placeholder: 'key', value: key, 'aria-label': 'key', oninput: () => this.grow() }),
      h('input', { type: 'text', class: 'v', placeholder: 'value', value, 'aria-label': 'value', oninput: () => this.grow() }),
      select('type', TYPES, type))
    row.querySelector('select').classList.add('t')
    row.querySelector('select').setAttribute('aria-label', 'type')
    this.rows.append(row)
  }

  grow () {
    const last = this.rows.lastElementChild
    if (last && (last.querySelector('.k').value || last.querySelector('.v').value)) this.add()
  }

  value () {
    const out = {}
    for (const row of this.rows.children) {
      const k = row.querySelector('.k').value.trim()
      const raw = row.querySelector('.v').value
      if (!k) continue
      const type = row.querySelector('.t').value
      if (type === 'number') {
        const n = Number(raw)
        if (raw.trim() === '' || Number.isNaN(n)) throw new Error(`${k}: ${raw} is not a number`)
        out[k] = n
      } else if (type === 'boolean') {
        out[k] = ['true', '1', 'yes'].includes(raw.trim().toLowerCase())
      } else if (type === 'list') {
        try { out[k] = JSON.parse(raw) } catch (e) { throw new Error(`${k}: not JSON`) }
      } else {
        out[k] = raw
      }
    }
    return out
  }

  reset () { this.rows.replaceChildren(); this.add() }
}

// submit handler: no page reload, button disabled while the request runs,
// errors as a toast
export function onSubmit (form, fn) {
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault()
    const buttons = form.querySelectorAll('button[type=submit]')
    buttons.forEach(b => { b.disabled = true })
    try {
      await fn(new FormData(form), ev.submitter)
    } catch (e) {
      toast(e.message, 'error')
    } finally {
      buttons.forEach(b => { b.disabled = false })
    }
  })
  return form
}

export function confirmed (text) { return window.confirm(text) }

export const QUEUE_ARGS = [['x-message-ttl', 'number'], ['x-expires', 'number'], ['x-max-length', 'number'],
  ['x-max-length-bytes', 'number'], ['x-overflow', 'string'], ['x-dead-letter-exchange', 'string'],
  ['x-dead-letter-routing-key', 'string'], ['x-max-priority', 'number'], ['x-queue-type', 'string'],
  ['x-single-active-consumer', 'boolean'], ['x-delivery-limit', 'number']]
export const EXCHANGE_ARGS = [['alternate-exchange', 'string'], ['x-delayed-type', 'string'],
  ['x-persist-messages', 'number'], ['x-persist-ms', 'number']]
// a binding's request for a persistent exchange's stored messages
export const REPLAY_ARGS = [['x-head', 'number'], ['x-tail', 'number'], ['x-from', 'number']]
const PROPERTY_KEYS = ['content_type', 'content_encoding', 'priority', 'correlation_id', 'reply_to', 'expiration',
  'message_id', 'timestamp', 'type', 'user_id', 'app_id']
const INT_PROPERTIES = ['priority', 'timestamp']

// publish through the exchange (amq.default for a queue's own page)
export function publishForm ({ vhost, exchange, routingKey = '', fixedKey = false }) {
  const headers = new ArgsEditor({ name: 'headers' })
  const props = new ArgsEditor({ name: 'properties', suggestions: PROPERTY_KEYS.map(k => [k, INT_PROPERTIES.includes(k) ? 'number' : 'string']) })
  const rk = input('routing_key', { value: routingKey, readonly: fixedKey || null })
  const form = h('form', { class: 'form-grid publish-form' },
    field('Routing key', rk),
    field('Delivery mode', select('delivery_mode', [['1', '1 - Non-persistent'], ['2', '2 - Persistent']], '2')),
    field('Headers', headers.el),
    field('Properties', props.el),
    field('Payload', h('textarea', { name: 'payload', rows: 6 })),
    field('Payload encoding', select('payload_encoding', [['string', 'String'], ['base64', 'Base64']], 'string')),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Publish message')))
  onSubmit(form, async (data) => {
    const properties = { ...props.value(), delivery_mode: Number(data.get('delivery_mode')) }
    const hdrs = headers.value()
    if (Object.keys(hdrs).length) properties.headers = hdrs
    const res = await post(`api/exchanges/${enc(vhost)}/${enc(exchange || 'amq.default')}/publish`, {
      routing_key: data.get('routing_key'), payload: data.get('payload'),
      payload_encoding: data.get('payload_encoding'), properties
    })
    if (res && res.routed) toast('Message published.')
    else toast('Message published, but not routed to any queue.', 'error')
  })
  return form
}
