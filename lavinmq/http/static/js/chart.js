// Line charts in SVG, built with the DOM (no library): the rate and
// length histories the API returns as `samples`.
import { h, fmtNumber } from './dom.js'

const NS = 'http://www.w3.org/2000/svg'
const HEIGHT = 200
const PAD = { left: 48, right: 10, top: 10, bottom: 22 }

function s (tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag)
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v)
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)))
  return el
}

// samples are newest first; counters as running totals: per-second rates
// between neighbours, oldest first
export function ratesOf (samples) {
  const pts = []
  if (!samples) return pts
  for (let i = samples.length - 1; i > 0; i--) {
    const a = samples[i]; const b = samples[i - 1]
    const dt = (b.timestamp - a.timestamp) / 1000
    if (dt > 0) pts.push([b.timestamp, Math.max(0, (b.sample - a.sample) / dt)])
  }
  return pts
}

export function valuesOf (samples) {
  return (samples || []).slice().reverse().map(x => [x.timestamp, x.sample])
}

function niceMax (v) {
  if (v <= 0) return 1
  const p = Math.pow(10, Math.floor(Math.log10(v)))
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p
  return 10 * p
}

function axisLabel (v) {
  if (v >= 1e6) return (v / 1e6).toLocaleString('en-US', { maximumFractionDigits: 1 }) + 'M'
  if (v >= 1e4) return (v / 1e3).toLocaleString('en-US', { maximumFractionDigits: 1 }) + 'k'
  return v.toLocaleString('en-US', { maximumFractionDigits: 2 })
}

function clock (t) {
  const d = new Date(t)
  return d.toTimeString().slice(0, 8)
}

export class Chart {
  constructor ({ title, unit = '', id }) {
    this.unit = unit
    this.svg = s('svg', { role: 'img', 'aria-label': title, viewBox: `0 0 600 ${HEIGHT}` })
    this.legend = h('div', { class: 'legend' })
    this.el = h('div', { class: 'chart', id },
      h('div', { class: 'chart-head' }, h('h2', null, title)), this.svg, this.legend)
    this.series = []
    this.observer = new window.ResizeObserver(() => this.draw())
    this.observer.observe(this.el)
  }

  // series: [{ label, points: [[ms, value], ...] }]
  update (series) {
    this.series = series
    this.draw()
  }

  draw () {
    const width = Math.max(this.el.clientWidth || 600, 240)
    const w = width - PAD.left - PAD.right
    const hgt = HEIGHT - PAD.top - PAD.bottom
    const all = this.series.flatMap(x => x.points)
    const svg = this.svg
    svg.setAttribute('viewBox', `0 0 ${width} ${HEIGHT}`)
    svg.replaceChildren()
    const t1 = all.length ? Math.max(...all.map(p => p[0])) : Date.now()
    const t0 = all.length ? Math.min(...all.map(p => p[0])) : t1 - 60000
    const span = Math.max(t1 - t0, 1000)
    const vmax = niceMax(all.length ? Math.max(...all.map(p => p[1])) : 0)
    const x = t => PAD.left + ((t - t0) / span) * w
    const y = v => PAD.top + hgt - (v / vmax) * hgt
    for (let i = 0; i <= 4; i++) {
      const v = (vmax * i) / 4
      svg.append(s('line', { class: 'grid', x1: PAD.left, x2: PAD.left + w, y1: y(v), y2: y(v) }))
      svg.append(s('text', { x: PAD.left - 5, y: y(v) + 3, 'text-anchor': 'end' }, axisLabel(v)))
    }
    for (let i = 0; i <= 3; i++) {
      const t = t0 + (span * i) / 3
      svg.append(s('text', { x: x(t), y: HEIGHT - 6, 'text-anchor': i === 0 ? 'start' : i === 3 ? 'end' : 'middle' }, clock(t)))
    }
    svg.append(s('line', { class: 'axis', x1: PAD.left, x2: PAD.left, y1: PAD.top, y2: PAD.top + hgt }))
    svg.append(s('line', { class: 'axis', x1: PAD.left, x2: PAD.left + w, y1: PAD.top + hgt, y2: PAD.top + hgt }))
    this.series.forEach((ser, i) => {
      if (!ser.points.length) return
      const pts = ser.points.map(p => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ')
      const max = Math.max(...ser.points.map(p => p[1]))
      svg.append(s('polyline', {
        class: `line s${i % 6}`, points: pts, 'data-series': ser.label,
        'data-count': ser.points.length, 'data-max': max
      }, s('title', null, ser.label)))
    })
    this.legend.replaceChildren(...this.series.map((ser, i) => {
      const last = ser.points.length ? ser.points[ser.points.length - 1][1] : null
      return h('span', null, h('span', { class: `swatch b${i % 6}` }), `${ser.label} `,
        h('strong', null, last === null ? '–' : fmtNumber(last) + this.unit))
    }))
  }

  destroy () { this.observer.disconnect() }
}
