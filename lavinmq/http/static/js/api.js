// The HTTP API as the UI uses it: Basic credentials kept in this tab's
// sessionStorage and sent as a header (no cookie, so no cross-site
// request carries them), JSON in and out. After an OAuth sign-in the
// session is the broker's HttpOnly cookie instead (SameSite Lax): then
// requests go with same-origin cookies and no header.
const KEY = 'lavinmq.auth'
const COOKIE_SESSION = 'oauth-cookie'

export class ApiError extends Error {
  constructor (status, reason) {
    super(reason || `HTTP ${status}`)
    this.status = status
  }
}

let onUnauthorized = () => {}
export function setUnauthorizedHandler (fn) { onUnauthorized = fn }

export function credentials () { return window.sessionStorage.getItem(KEY) }

export function forget () {
  window.sessionStorage.removeItem(KEY)
  window.sessionStorage.removeItem('lavinmq.user')
}

export function enc (s) { return encodeURIComponent(s) }

export async function request (method, path, { body, headers = {}, auth } = {}) {
  const h = { Accept: 'application/json', ...headers }
  // auth 'none': the /oauth routes, which need no login (their cookies do count)
  const token = auth === 'none' ? COOKIE_SESSION : (auth || credentials())
  const cookie = token === COOKIE_SESSION
  if (token && !cookie) h.Authorization = 'Basic ' + token
  if (method !== 'GET' && method !== 'HEAD') h['Content-Type'] = 'application/json'
  // credentials 'omit': the browser adds no cookies and never opens its own
  // Basic-auth dialog on a 401; the header above is ours
  const resp = await window.fetch(path, {
    method, headers: h, credentials: cookie ? 'same-origin' : 'omit', cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  if (resp.status === 401 && !auth) {
    forget()
    onUnauthorized()
  }
  // always read the body to its end: a response left unread is cancelled
  // later, which the browser reports as a failed request
  const text = await resp.text()
  const type = resp.headers.get('Content-Type') || ''
  if (!resp.ok) {
    let reason = resp.statusText
    try { reason = JSON.parse(text).reason || reason } catch (e) { /* not JSON */ }
    throw new ApiError(resp.status, reason)
  }
  if (!text) return null
  return type.includes('json') ? JSON.parse(text) : text
}

export const get = (path, opts) => request('GET', path, opts)
export const put = (path, body, opts) => request('PUT', path, { ...opts, body: body || {} })
export const post = (path, body, opts) => request('POST', path, { ...opts, body: body || {} })
export const del = (path, opts) => request('DELETE', path, opts)

export async function login (username, password) {
  let bin = ''
  for (const b of new TextEncoder().encode(`${username}:${password}`)) bin += String.fromCharCode(b)
  const token = window.btoa(bin)
  const me = await request('GET', 'api/whoami', { auth: token })
  window.sessionStorage.setItem(KEY, token)
  window.sessionStorage.setItem('lavinmq.user', JSON.stringify(me))
  return me
}

// the OAuth sign-in's non-HttpOnly marker cookie (LavinMQ's "m"): a session to resume
export function oauthSession () { return /(^|;\s*)m=%7Coauth%3A|(^|;\s*)m=\|oauth:/.test(document.cookie) }

export async function resumeOAuthSession () {
  const me = await request('GET', 'api/whoami', { auth: COOKIE_SESSION })
  window.sessionStorage.setItem(KEY, COOKIE_SESSION)
  window.sessionStorage.setItem('lavinmq.user', JSON.stringify(me))
  return me
}

export function isOAuthSession () { return credentials() === COOKIE_SESSION }

export function currentUser () {
  try { return JSON.parse(window.sessionStorage.getItem('lavinmq.user')) } catch (e) { return null }
}

export function hasTag (...tags) {
  const me = currentUser()
  const mine = (me && me.tags) || []
  return mine.includes('administrator') || tags.some(t => mine.includes(t))
}
