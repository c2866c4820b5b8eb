// Elements are built with the DOM API, never from HTML strings: names
// that users chose (queues, users, payloads) cannot become markup.
export function h (tag, attrs, ...children) {
  const el = document.createElement(tag)
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v)
      else if (k === 'class') el.className = v
      else if (k === 'dataset') Object.assign(el.dataset, v)
      else if (k === 'value') el.value = v
      else if (k === 'checked' || k === 'selected' || k === 'disabled' || k === 'required' || k === 'multiple') el[k] = Boolean(v)
      else el.setAttribute(k, v === true ? '' : v)
    }
  }
  append(el, children)
  return el
}

function append (el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue
    if (Array.isArray(c)) append(el, c)
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)))
  }
}

export function clear (el, ...children) {
  el.replaceChildren()
  append(el, children)
  return el
}

export function link (href, text, attrs = {}) { return h('a', { href, ...attrs }, text) }

export function fmtNumber (n) {
  if (n === undefined || n === null || Number.isNaN(n)) return '–'
  return Number(n).toLocaleString('en-US', { maximumFractionDigits: 1 })
}

export function fmtRate (details) {
  const r = details && typeof details === 'object' ? details.rate : details
  if (r === undefined || r === null) return '–'
  return `${Number(r).toLocaleString('en-US', { maximumFractionDigits: 1 })}/s`
}

export function fmtBytes (n) {
  if (n === undefined || n === null) return '–'
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  let v = Number(n)
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++ }
  return `${v.toLocaleString('en-US', { maximumFractionDigits: i ? 1 : 0 })} ${units[i]}`
}

export function fmtDuration (ms) {
  if (ms === undefined || ms === null) return '–'
  let s = Math.floor(ms / 1000)
  const d = Math.floor(s / 86400); s -= d * 86400
  const hh = Math.floor(s / 3600); s -= hh * 3600
  const mm = Math.floor(s / 60); s -= mm * 60
  if (d) return `${d}d ${hh}h ${mm}m`
  if (hh) return `${hh}h ${mm}m ${s}s`
  if (mm) return `${mm}m ${s}s`
  return `${s}s`
}

export function fmtValue (v) {
  if (v === undefined || v === null) return ''
  if (typeof v === 'object') return JSON.stringify(v)
  return String(v)
}

export function badge (text, kind) { return h('span', { class: 'badge' + (kind ? ' ' + kind : '') }, text) }

export function stat (label, value, attrs = {}) {
  return h('div', { class: 'stat', dataset: { label }, ...attrs }, h('span', { class: 'value' }, value), h('span', { class: 'label' }, label))
}

export function props (pairs) {
  const dl = h('dl', { class: 'props' })
  for (const [k, v] of pairs) {
    if (v === undefined) continue
    dl.append(h('dt', null, k), h('dd', null, v instanceof Node ? v : fmtValue(v)))
  }
  return dl
}

export function argsList (args) {
  const entries = Object.entries(args || {})
  if (!entries.length) return h('span', { class: 'muted' }, 'none')
  return h('dl', { class: 'props' }, entries.map(([k, v]) => [h('dt', null, k), h('dd', { class: 'mono' }, fmtValue(v))]))
}

let toastBox = null
export function toast (text, kind = 'info') {
  if (!toastBox || !toastBox.isConnected) {
    toastBox = h('div', { id: 'toasts', role: 'status', 'aria-live': 'polite' })
    document.body.append(toastBox)
  }
  const t = h('div', { class: 'toast ' + kind }, text)
  toastBox.append(t)
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 4000)
}

export function card (title, ...children) {
  return h('section', { class: 'card' }, title ? h('h2', null, title) : null, ...children)
}
