// KeyedTable keeps one <tr> per key and touches the DOM only where a value
// changed: rows are created once, cells are rewritten only when the text (or
// value key) they show differs from what they last showed, and rows are
// moved only when the order changes. Callers mark keys dirty as data
// changes and flush once per animation frame.

export class KeyedTable {
  // tbody: the element holding the rows.
  // attr: the data attribute naming a row's key (e.g. "worker-id").
  // columns: [{name, className, init(td), value(item, now) -> string, paint(td, item, value)}];
  //   value is compared with what the cell last showed; paint (optional)
  //   renders it, else the value becomes the cell's text; init (optional)
  //   builds the cell's fixed structure once, in the row template.
  // compare(a, b): order of keys, for sorted tables (see flush).
  // rowState(item): optional string set as the row's data-state.
  // rowTag, cellTag: "tr" and "td" by default; a div grid gets ARIA roles.
  constructor(tbody, { attr, columns, compare, rowState, rowTag = "tr", cellTag = "td" }) {
    this.rowTag = rowTag;
    this.cellTag = cellTag;
    this.tbody = tbody;
    this.attr = attr;
    this.columns = columns;
    this.compare = compare;
    this.rowState = rowState;
    this.filter = null;
    // quiet: the next flush adds rows without the new-row highlight (rows
    // from a snapshot are not news).
    this.quiet = true;
    this.rows = new Map();
    this.order = [];
    this.dirty = new Set();
    this.visible = 0;
  }

  mark(key) {
    this.dirty.add(key);
  }

  markAll() {
    for (const key of this.rows.keys()) this.dirty.add(key);
  }

  get size() {
    return this.rows.size;
  }

  row(key) {
    const r = this.rows.get(key);
    return r ? r.tr : null;
  }

  // template is the row every new row is cloned from: cells with their
  // classes, roles and data-col, and whatever fixed structure a column's
  // init puts in its cell. Cloning is much cheaper than building.
  template() {
    if (this.tpl) return this.tpl;
    const tr = document.createElement(this.rowTag);
    const aria = this.rowTag !== "tr";
    if (aria) {
      tr.className = "row";
      tr.setAttribute("role", "row");
    }
    for (const c of this.columns) {
      const td = document.createElement(this.cellTag);
      if (aria) td.setAttribute("role", "cell");
      td.dataset.col = c.name;
      if (c.className) td.className = c.className;
      if (c.init) c.init(td);
      tr.appendChild(td);
    }
    this.tpl = tr;
    return tr;
  }

  create(key, fresh) {
    const tr = this.template().cloneNode(true);
    tr.setAttribute(`data-${this.attr}`, key);
    if (fresh) {
      // Highlight a new row once; the class goes when the animation ends,
      // so moving the row later (a re-layout) does not replay it.
      tr.classList.add("fresh");
      tr.addEventListener("animationend", () => tr.classList.remove("fresh"), { once: true });
    }
    const row = { tr, tds: Array.from(tr.children), vals: new Array(this.columns.length).fill(undefined), state: undefined };
    this.rows.set(key, row);
    return row;
  }

  paint(row, item, now) {
    const cols = this.columns;
    for (let i = 0; i < cols.length; i++) {
      const c = cols[i];
      const v = c.value(item, now);
      if (row.vals[i] === v) continue;
      row.vals[i] = v;
      if (c.paint) c.paint(row.tds[i], item, v);
      else row.tds[i].textContent = v;
    }
    if (this.rowState) {
      const s = this.rowState(item);
      if (row.state !== s) {
        row.state = s;
        row.tr.dataset.state = s;
      }
    }
    const hide = this.filter ? !this.filter(item) : false;
    if (row.tr.hidden !== hide) row.tr.hidden = hide;
  }

  // flush applies the dirty keys of a sorted table: get(key) returns the
  // item, or undefined when the key is gone. New rows go to their sorted
  // place (appended in the common case of increasing keys); a large batch
  // (a snapshot) is laid out in one pass.
  flush(get, now = Date.now()) {
    if (this.dirty.size === 0) return false;
    const added = [];
    let removed = false;
    const bulk = this.dirty.size > 64;
    const fresh = !bulk && !this.quiet;
    this.quiet = false;
    for (const key of this.dirty) {
      const item = get(key);
      let row = this.rows.get(key);
      if (item === undefined) {
        if (row) {
          row.tr.remove();
          this.rows.delete(key);
          removed = true;
        }
        continue;
      }
      if (!row) {
        row = this.create(key, fresh);
        added.push(key);
      }
      this.paint(row, item, now);
    }
    this.dirty.clear();
    if (removed) this.order = this.order.filter((k) => this.rows.has(k));
    if (added.length > 32 || (added.length && this.order.length === 0)) {
      this.order = [...this.rows.keys()].sort(this.compare);
      const frag = document.createDocumentFragment();
      for (const k of this.order) frag.appendChild(this.rows.get(k).tr);
      this.tbody.replaceChildren(frag);
    } else {
      for (const key of added) this.insert(key);
    }
    this.countVisible();
    return true;
  }

  insert(key) {
    const order = this.order;
    let lo = 0;
    let hi = order.length;
    if (hi > 0 && this.compare(order[hi - 1], key) < 0) {
      lo = hi; // the common case: a new highest key
    }
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.compare(order[mid], key) < 0) lo = mid + 1;
      else hi = mid;
    }
    order.splice(lo, 0, key);
    const next = lo + 1 < order.length ? this.rows.get(order[lo + 1]).tr : null;
    this.tbody.insertBefore(this.rows.get(key).tr, next);
  }

  // flushOrdered shows exactly keys, in that order (a server-ordered page).
  flushOrdered(keys, get, now = Date.now()) {
    const fresh = this.order.length > 0 && !this.quiet;
    this.quiet = false;
    const want = new Set(keys);
    for (const [key, row] of this.rows) {
      if (!want.has(key)) {
        row.tr.remove();
        this.rows.delete(key);
      }
    }
    for (const key of keys) {
      const row = this.rows.get(key) || this.create(key, fresh);
      this.paint(row, get(key), now);
    }
    this.dirty.clear();
    const same = keys.length === this.order.length && keys.every((k, i) => k === this.order[i]);
    if (!same) {
      this.order = keys.slice();
      const frag = document.createDocumentFragment();
      for (const k of keys) frag.appendChild(this.rows.get(k).tr);
      this.tbody.replaceChildren(frag);
    }
    this.countVisible();
  }

  countVisible() {
    let n = 0;
    for (const row of this.rows.values()) if (!row.tr.hidden) n++;
    this.visible = n;
  }
}
