// A list the server pages, sorts and filters (page, page_size, sort,
// sort_reverse, name, use_regex: the API's list parameters), so that a
// broker with 10,000 queues sends one page at a time.
import { h, clear, fmtNumber } from './dom.js'
import { get } from './api.js'

const PAGE_SIZES = [20, 50, 100, 500]

export class Table {
  // path(): the list's URL without query; columns: [{ label, key (sort key,
  // or none), num, render(item) }]
  constructor ({ id, path, columns, sort, reverse = false, filter = true, pageSize = 20, empty = 'Nothing here yet.', rowAttrs }) {
    this.id = id
    this.path = path
    this.columns = columns
    this.sort = sort
    this.reverse = reverse
    this.page = 1
    this.pageSize = pageSize
    this.name = ''
    this.regex = false
    this.emptyText = empty
    this.rowAttrs = rowAttrs
    this.tbody = h('tbody')
    this.head = h('tr', null, columns.map(c => this.headerCell(c)))
    this.info = h('span')
    this.pager = h('div', { class: 'pager' })
    const tools = h('div', { class: 'table-tools' })
    if (filter) {
      let timer = null
      const input = h('input', {
        type: 'search', placeholder: 'Filter by name', 'aria-label': 'Filter by name', class: 'filter',
        oninput: () => { clearTimeout(timer); timer = setTimeout(() => { this.name = input.value; this.page = 1; this.refresh() }, 250) }
      })
      const rx = h('input', { type: 'checkbox', onchange: () => { this.regex = rx.checked; this.page = 1; this.refresh() } })
      tools.append(input, h('label', { class: 'muted' }, rx, ' regex'))
    }
    const size = h('select', {
      'aria-label': 'Rows per page',
      onchange: () => { this.pageSize = Number(size.value); this.page = 1; this.refresh() }
    }, PAGE_SIZES.map(n => h('option', { value: n, selected: n === pageSize }, `${n} per page`)))
    tools.append(h('span', { class: 'spacer' }), this.info, size)
    this.el = h('div', { class: 'table', id },
      tools,
      h('div', { class: 'table-wrap' }, h('table', null, h('thead', null, this.head), this.tbody)),
      this.pager)
  }

  headerCell (c) {
    const cls = [c.num ? 'num' : '', c.key ? 'sortable' : '', c.key && c.key === this.sort ? (this.reverse ? 'sorted-desc' : 'sorted-asc') : '']
    return h('th', {
      class: cls.filter(Boolean).join(' ') || null,
      onclick: c.key ? () => this.sortBy(c.key) : null,
      title: c.key ? 'Sort' : null
    }, c.label)
  }

  sortBy (key) {
    if (this.sort === key) this.reverse = !this.reverse
    else { this.sort = key; this.reverse = false }
    this.head.replaceChildren(...this.columns.map(c => this.headerCell(c)))
    this.refresh()
  }

  url () {
    const q = new URLSearchParams({ page: this.page, page_size: this.pageSize })
    if (this.sort) { q.set('sort', this.sort); q.set('sort_reverse', this.reverse) }
    if (this.name) { q.set('name', this.name); q.set('use_regex', this.regex) }
    return `${this.path()}?${q}`
  }

  async refresh () {
    const data = await get(this.url())
    if (data.page_count && this.page > data.page_count) {
      this.page = data.page_count
      return this.refresh()
    }
    this.render(data)
    return data
  }

  render (data) {
    const items = data.items
    if (!items.length) {
      clear(this.tbody, h('tr', null, h('td', { class: 'empty', colspan: this.columns.length }, this.emptyText)))
    } else {
      clear(this.tbody, items.map(item => h('tr', this.rowAttrs ? this.rowAttrs(item) : null,
        this.columns.map(c => h('td', { class: c.num ? 'num' : (c.cls || null) }, c.render(item))))))
    }
    const shown = data.filtered_count === data.total_count
      ? `${fmtNumber(data.total_count)} total`
      : `${fmtNumber(data.filtered_count)} of ${fmtNumber(data.total_count)}`
    this.info.textContent = shown
    const go = (p) => () => { this.page = p; this.refresh() }
    clear(this.pager,
      h('button', { class: 'secondary small', disabled: data.page <= 1, onclick: go(data.page - 1) }, '‹ Previous'),
      h('span', { class: 'page-of' }, `Page ${data.page} of ${data.page_count}`),
      h('button', { class: 'secondary small', disabled: data.page >= data.page_count, onclick: go(data.page + 1) }, 'Next ›'))
    this.pager.classList.toggle('hidden', data.page_count <= 1)
  }
}
