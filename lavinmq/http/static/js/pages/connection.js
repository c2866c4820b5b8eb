// One connection: details, client properties, data rates, its channels,
// and closing it with a reason the client receives.
import { h, clear, props, fmtNumber, fmtBytes, argsList, toast, card } from '../dom.js'
import { get, request, enc } from '../api.js'
import { Chart, ratesOf } from '../chart.js'
import { field, input, onSubmit, confirmed } from '../forms.js'
import { historyQuery, channelHref, queueHref, nameLink, stateBadge, yesNo, Guard } from './common.js'
import { clientName } from './connections.js'

export async function render ({ main, params, navigate }) {
  const [name] = params
  const base = `api/connections/${enc(name)}`
  const guard = new Guard()
  const details = h('div', { id: 'connection-details' })
  const subtitle = h('small', { id: 'connection-subtitle' }, 'connection')
  const client = h('div', { id: 'client-properties' })
  const channels = h('div', { class: 'table-wrap', id: 'connection-channels' })
  const rates = new Chart({ title: 'Data rates', unit: ' B/s', id: 'chart-data' })
  const closeForm = h('form', { class: 'form-grid', id: 'close-connection' },
    field('Reason', input('reason', { value: 'Closed via management UI' })),
    h('div', { class: 'full' }, h('button', { type: 'submit', class: 'danger' }, 'Close connection')))
  onSubmit(closeForm, async (data) => {
    if (!confirmed(`Close the connection ${name}?`)) return
    await guard.remove(() => request('DELETE', base, { headers: { 'X-Reason': data.get('reason') } }))
    toast('Connection closed.')
    navigate('#/connections')
  })

  async function refresh () {
    return guard.refresh(async () => {
      const [c, chs] = await Promise.all([get(`${base}?${historyQuery()}`), get(`${base}/channels`)])
      const mqtt = c.client_id !== undefined
      clear(details, props([['Virtual host', c.vhost], ['User', c.user], ['State', stateBadge(c.state)],
        [mqtt ? 'Client id' : 'Client', clientName(c)], ['Peer', `${c.peer_host}:${c.peer_port}`],
        ['Protocol', c.protocol + (c.transport === 'websocket' ? ' over WebSocket' : '')],
        ['Authentication', c.auth_mechanism], ['TLS', yesNo(c.ssl)], [mqtt ? 'Keepalive' : 'Heartbeat', `${c.timeout} s`],
        ...(mqtt
          ? [['Clean session', yesNo(c.clean_session)],
              ['Session', c.session ? nameLink(queueHref(c.vhost, c.session), c.session) : '–'],
              ['Max packet size', fmtNumber(c.frame_max)]]
          : [['Frame max', fmtNumber(c.frame_max)], ['Channel max', fmtNumber(c.channel_max)]]),
        ['Received', fmtBytes(c.recv_oct)], ['Sent', fmtBytes(c.send_oct)],
        ['Connected at', c.connected_at ? new Date(c.connected_at).toLocaleString() : undefined]]))
      clear(client, argsList(c.client_properties))
      // the name its client gave it (connection_name), first in the details
      clear(subtitle, c.user_provided_name ? `connection "${c.user_provided_name}"` : 'connection')
      if (c.user_provided_name) details.firstChild.prepend(h('dt', null, 'Client-provided name'), h('dd', null, c.user_provided_name))
      rates.update([{ label: 'Received', points: ratesOf((c.recv_oct_details || {}).samples) },
        { label: 'Sent', points: ratesOf((c.send_oct_details || {}).samples) }])
      clear(channels, chs.length
        ? h('table', null, h('thead', null, h('tr', null, ['Channel', 'Mode', 'Prefetch', 'Unacked', 'Consumers'].map(t => h('th', null, t)))),
          h('tbody', null, chs.map(ch => h('tr', null, h('td', null, nameLink(channelHref(ch.name), ch.name)),
            h('td', null, [ch.confirm ? 'confirm' : '', ch.transactional ? 'transactional' : ''].filter(Boolean).join(', ') || '–'),
            h('td', { class: 'num' }, fmtNumber(ch.prefetch_count)), h('td', { class: 'num' }, fmtNumber(ch.messages_unacknowledged)),
            h('td', { class: 'num' }, fmtNumber(ch.consumer_count))))))
        : h('p', { class: 'muted' }, 'No channels.'))
    })
  }
  clear(main, h('h1', null, name, subtitle),
    h('div', { class: 'grid-2' }, card('Details', details), h('section', { class: 'card' }, rates.el)),
    card('Channels', channels), card('Client properties', client), card('Close this connection', closeForm))
  await refresh()
  return { refresh, destroy () { rates.destroy(); guard.gone = true } }
}
