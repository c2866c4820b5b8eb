// Pieces several pages share: links to objects, the vhost-filtered list
// paths, history ranges for charts and a guard against refreshing an
// object the user just deleted.
import { h, badge, fmtValue } from '../dom.js'
import { enc } from '../api.js'

export function listPath (base, vhost) { return vhost ? `${base}/${enc(vhost)}` : base }

export function queueHref (vhost, name, type) { return `#/${type === 'stream' ? 'stream' : 'queue'}/${enc(vhost)}/${enc(name)}` }
export function exchangeHref (vhost, name) { return `#/exchange/${enc(vhost)}/${enc(name === '' ? 'amq.default' : name)}` }
export function connectionHref (name) { return `#/connection/${enc(name)}` }
export function channelHref (name) { return `#/channel/${enc(name)}` }
export function userHref (name) { return `#/user/${enc(name)}` }
export function vhostHref (name) { return `#/vhost/${enc(name)}` }

export function nameLink (href, text) { return h('a', { href }, text === '' ? '(AMQP default)' : text) }

// query parameters that ask for `samples` covering the chart
export function historyQuery () {
  const v = window.localStorage.getItem('lavinmq.refresh')
  const incr = Math.max(1, v === null || Number(v) === 0 ? 5 : Number(v))
  const age = incr * 120
  return `lengths_age=${age}&lengths_incr=${incr}&msg_rates_age=${age}&msg_rates_incr=${incr}` +
    `&data_rates_age=${age}&data_rates_incr=${incr}`
}

export function features (item) {
  const out = []
  if (item.durable) out.push(badge('D', null))
  if (item.auto_delete) out.push(badge('AD'))
  if (item.exclusive) out.push(badge('Excl'))
  if (item.internal) out.push(badge('I'))
  for (const [k, v] of Object.entries(item.arguments || {})) out.push(h('span', { class: 'badge', title: `${k}: ${fmtValue(v)}` }, k.replace(/^x-/, '')))
  return out.length ? out : '–'
}

export function stateBadge (state) {
  const kind = { running: 'ok', idle: 'ok', paused: 'warn', flow: 'warn', blocked: 'bad', closed: 'bad', closing: 'warn' }[state]
  return badge(state || '–', kind)
}

export function yesNo (v) { return v ? 'yes' : 'no' }

// A page showing one object: refreshes stop once it is being deleted, and
// the delete waits for a refresh in flight, so no request asks for an
// object that is gone.
export class Guard {
  constructor () { this.gone = false; this.inflight = null }
  async refresh (fn) {
    if (this.gone) return
    this.inflight = fn()
    try { return await this.inflight } finally { this.inflight = null }
  }

  async remove (fn) {
    this.gone = true
    if (this.inflight) await this.inflight.catch(() => {})
    try { return await fn() } catch (e) { this.gone = false; throw e }
  }
}

export function escapeRegex (s) { return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') }
