// The shell: login, navigation by the user's tags, the vhost filter, the
// refresh timer and a hash router (#/queues, #/queue/VHOST/NAME, ...).
import { h, clear, toast } from './dom.js'
import { get, login, forget, credentials, currentUser, hasTag, setUnauthorizedHandler, oauthSession, resumeOAuthSession, isOAuthSession } from './api.js'

const PAGES = {
  '': () => import('./pages/overview.js'),
  overview: () => import('./pages/overview.js'),
  connections: () => import('./pages/connections.js'),
  connection: () => import('./pages/connection.js'),
  channels: () => import('./pages/channels.js'),
  channel: () => import('./pages/channel.js'),
  consumers: () => import('./pages/consumers.js'),
  exchanges: () => import('./pages/exchanges.js'),
  exchange: () => import('./pages/exchange.js'),
  queues: () => import('./pages/queues.js'),
  queue: () => import('./pages/queue.js'),
  stream: () => import('./pages/stream.js'),
  unacked: () => import('./pages/unacked.js'),
  nodes: () => import('./pages/nodes.js'),
  users: () => import('./pages/users.js'),
  user: () => import('./pages/user.js'),
  vhosts: () => import('./pages/vhosts.js'),
  vhost: () => import('./pages/vhost.js'),
  policies: () => import('./pages/policies.js'),
  'operator-policies': () => import('./pages/policies.js'),
  definitions: () => import('./pages/definitions.js'),
  shovels: () => import('./pages/shovels.js'),
  federation: () => import('./pages/federation.js'),
  logs: () => import('./pages/logs.js')
}

// [route, label, tags that see it (none: every management user)]
const NAV = [
  ['overview', 'Overview'], ['connections', 'Connections'], ['channels', 'Channels'],
  ['exchanges', 'Exchanges'], ['queues', 'Queues'], ['consumers', 'Consumers'],
  ['nodes', 'Nodes', ['administrator', 'monitoring']],
  ['-', 'Admin', ['administrator', 'policymaker']],
  ['users', 'Users', ['administrator']], ['vhosts', 'Virtual hosts', ['administrator']],
  ['policies', 'Policies', ['policymaker']], ['operator-policies', 'Operator policies', ['administrator']],
  ['shovels', 'Shovels', ['policymaker']], ['federation', 'Federation', ['policymaker']],
  ['definitions', 'Definitions', ['administrator']], ['logs', 'Log', ['administrator']]
]

const app = document.getElementById('app')
let current = null       // the page on screen: { refresh, destroy }
let timer = null

export function vhostFilter () { return window.sessionStorage.getItem('lavinmq.vhost') || '' }

export function refreshSeconds () {
  const v = window.localStorage.getItem('lavinmq.refresh')
  return v === null ? 5 : Number(v)
}

export function navigate (hash) { window.location.hash = hash }

function route () {
  const parts = window.location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent)
  return { name: parts[0] || '', params: parts.slice(1) }
}

function showLogin (message) {
  stopPage()
  app.className = ''
  const user = h('input', { type: 'text', name: 'username', id: 'username', autocomplete: 'username', required: true, autofocus: true })
  const pass = h('input', { type: 'password', name: 'password', id: 'password', autocomplete: 'current-password' })
  const error = h('p', { class: 'error-text', role: 'alert' }, message || '')
  const form = h('form', { class: 'login', id: 'login-form' },
    h('h1', null, h('img', { src: 'static/favicon.svg', alt: '' }), 'LavinMQ'),
    h('label', { for: 'username' }, 'Username'), user,
    h('label', { for: 'password' }, 'Password'), pass,
    h('button', { type: 'submit' }, 'Log in'), error)
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault()
    try {
      await login(user.value, pass.value)
      start()
    } catch (e) {
      error.textContent = e.status === 401 ? 'Login failed: wrong username or password, or the user has no management tag.' : e.message
    }
  })
  clear(app, form)
  user.focus()
  // LavinMQ's OAuth sign-in, when the broker has one: the issuer's page, then back here
  const params = new URLSearchParams(window.location.search)
  if (params.get('oauth_error')) error.textContent = 'OAuth sign-in failed: ' + params.get('oauth_error')
  get('oauth/enabled', { auth: 'none' }).then(r => {
    if (!r || !r.enabled) return
    const sso = h('button', {
      type: 'button', class: 'secondary', id: 'oauth-login',
      onclick: async () => {
        try {
          const { authorize_url: url } = await get('oauth/authorize', { auth: 'none' })
          window.location.assign(url)
        } catch (e) { error.textContent = e.message }
      }
    }, 'Sign in with OAuth')
    form.insertBefore(sso, error)
  }).catch(() => {})
}

function stopPage () {
  if (timer) clearInterval(timer)
  timer = null
  if (current && current.destroy) current.destroy()
  current = null
}

let shell = null

function buildShell () {
  const me = currentUser()
  const nav = h('nav', { 'aria-label': 'Main' })
  for (const [r, label, tags] of NAV) {
    if (tags && !hasTag(...tags)) continue
    if (r === '-') nav.append(h('div', { class: 'nav-group' }, label))
    else nav.append(h('a', { href: '#/' + r, dataset: { route: r } }, label))
  }
  const vhostSel = h('select', { id: 'vhost-filter', 'aria-label': 'Virtual host' }, h('option', { value: '' }, 'All vhosts'))
  vhostSel.addEventListener('change', () => {
    window.sessionStorage.setItem('lavinmq.vhost', vhostSel.value)
    render()
  })
  const refresh = h('select', { id: 'refresh', 'aria-label': 'Refresh interval' },
    [[1, 'every 1 s'], [5, 'every 5 s'], [10, 'every 10 s'], [30, 'every 30 s'], [0, 'off']].map(([v, t]) =>
      h('option', { value: v, selected: v === refreshSeconds() }, t)))
  refresh.addEventListener('change', () => {
    window.localStorage.setItem('lavinmq.refresh', refresh.value)
    startTimer()
  })
  const shellEl = h('div', { class: 'shell' })
  const toggle = h('button', { class: 'secondary small menu-toggle', 'aria-label': 'Menu', onclick: () => shellEl.classList.toggle('nav-open') }, '☰')
  nav.addEventListener('click', () => shellEl.classList.remove('nav-open'))
  const main = h('main', { id: 'main' })
  shellEl.append(
    h('aside', { class: 'sidebar' }, h('div', { class: 'sidebar-inner' },
      h('div', { class: 'brand' }, h('img', { src: 'static/favicon.svg', alt: '' }), 'LavinMQ'), nav)),
    h('div', { class: 'content' },
      h('header', { class: 'topbar' }, toggle,
        h('label', null, 'Vhost', vhostSel),
        h('label', null, 'Refresh', refresh),
        h('span', { class: 'spacer' }),
        h('a', { href: 'docs/', target: '_blank', rel: 'noopener', id: 'api-docs-link' }, 'HTTP API'),
        h('span', { id: 'whoami' }, me.name, ' ', h('span', { class: 'muted' }, `(${(me.tags || []).join(', ') || 'no tags'})`)),
        h('button', { class: 'secondary small', id: 'logout', onclick: logout }, 'Log out')),
      main))
  clear(app, shellEl)
  app.className = ''
  get('api/vhosts?columns=name').then(list => {
    const chosen = vhostFilter()
    const names = list.map(v => v.name)
    if (chosen && !names.includes(chosen)) window.sessionStorage.removeItem('lavinmq.vhost')
    vhostSel.append(...names.map(n => h('option', { value: n, selected: n === chosen }, n)))
  }).catch(e => toast(e.message, 'error'))
  return { main, nav }
}

function logout () {
  const oauth = isOAuthSession()
  forget()
  shell = null
  if (oauth) { window.location.assign('oauth/logout'); return }
  window.location.hash = '#/'
  showLogin('Logged out.')
}

function startTimer () {
  if (timer) clearInterval(timer)
  timer = null
  const secs = refreshSeconds()
  if (!secs || !current || !current.refresh) return
  timer = setInterval(() => {
    if (document.hidden || !current || !current.refresh) return
    current.refresh().catch(e => { if (e.status !== 401) console.warn('refresh failed:', e.message) })
  }, secs * 1000)
}

let renderSeq = 0

async function render () {
  if (!credentials()) return showLogin()
  if (!shell) shell = buildShell()
  stopPage()
  const seq = ++renderSeq
  const { name, params } = route()
  for (const a of shell.nav.querySelectorAll('a')) {
    const r = a.dataset.route
    a.classList.toggle('active', r === name || (name === '' && r === 'overview') || (name && r === name + 's') ||
      ((name === 'stream' || name === 'unacked') && r === 'queues') ||
      (name === 'operator-policies' && r === name))
  }
  const loader = PAGES[name]
  const main = shell.main
  if (!loader) {
    clear(main, h('h1', null, 'Not found'), h('p', null, 'No such page. ', h('a', { href: '#/' }, 'Go to the overview.')))
    return
  }
  clear(main, h('p', { class: 'muted' }, 'Loading…'))
  try {
    const mod = await loader()
    if (seq !== renderSeq) return
    const page = await mod.render({ main, params, route: name, vhost: vhostFilter(), navigate })
    if (seq !== renderSeq) { if (page && page.destroy) page.destroy(); return }
    current = page || {}
    startTimer()
  } catch (e) {
    if (seq !== renderSeq || e.status === 401) return
    clear(main, h('h1', null, 'Error'), h('p', { class: 'error-text' }, e.message))
  }
}

function start () {
  shell = null
  if (!credentials() && oauthSession()) {
    // back from the issuer with a session cookie: resume it
    resumeOAuthSession().then(() => {
      window.history.replaceState(null, '', window.location.pathname + window.location.hash)
      render()
    }).catch(() => showLogin('Your OAuth session has ended: sign in again.'))
    return
  }
  render()
}

setUnauthorizedHandler(() => { shell = null; showLogin('Your session has ended: log in again.') })
window.addEventListener('hashchange', render)
start()

