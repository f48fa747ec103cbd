// A table body that renders only the rows in and near the window: a folder of 10,000 entries
// costs the DOM of a few dozen rows, whatever the scroll position. Two spacer rows stand for
// the rows above and below; the page itself scrolls (no inner scroll box), so the browser's
// own scrolling, find-in-page of what is shown, and zoom behave as on any page.
//
// Rows have one height (measured from the first one rendered). Screen readers get the whole
// table's size and each row's place from aria-rowcount and aria-rowindex. Keyboard: Up and
// Down move between rows (scrolling them into view), Home and End go to the first and last.

const OVERSCAN = 12;
/** Before the first row is measured. */
const DEFAULT_ROW_HEIGHT = 45;

export class Rows {
  /**
   * `table` is the <table>; `render(item, index)` makes an item's <tr>; `focusable` selects,
   * inside a row, what the keyboard moves focus to.
   */
  constructor(table, render, focusable) {
    this.table = table;
    this.body = table.tBodies[0];
    this.render = render;
    this.focusable = focusable;
    this.items = [];
    this.rowHeight = DEFAULT_ROW_HEIGHT;
    this.measured = false;
    this.range = [0, 0];
    this.top = this.spacer();
    this.bottom = this.spacer();
    let pending = false;
    const later = () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        this.update();
      });
    };
    window.addEventListener("scroll", later, { passive: true });
    window.addEventListener("resize", later);
    this.body.addEventListener("keydown", (e) => this.onKey(e));
  }

  spacer() {
    const td = document.createElement("td");
    // Exactly the header's columns: more would add columns to a fixed-layout table.
    td.colSpan = this.table.tHead?.rows[0]?.cells.length || 1;
    const tr = document.createElement("tr");
    tr.className = "spacer";
    tr.setAttribute("aria-hidden", "true");
    tr.append(td);
    return tr;
  }

  /** Shows `items` (already in display order), from the top of the list. */
  set(items) {
    this.items = items;
    this.table.setAttribute("aria-rowcount", String(items.length + 1));
    this.range = [0, 0];
    this.update(true);
  }

  /** Renders the rows the window shows, if they changed (or `force`). */
  update(force = false) {
    const n = this.items.length;
    const h = this.rowHeight;
    const bodyTop = this.body.getBoundingClientRect().top + window.scrollY;
    const from = Math.max(0, Math.floor((window.scrollY - bodyTop) / h) - OVERSCAN);
    const to = Math.min(n, Math.ceil((window.scrollY + window.innerHeight - bodyTop) / h) + OVERSCAN);
    const [start, end] = from < to ? [from, to] : [0, Math.min(n, OVERSCAN * 2)];
    if (!force && start === this.range[0] && end === this.range[1]) return;
    // Keep focus where it was if its row stays rendered.
    const focusedIndex = this.indexOf(document.activeElement);
    this.range = [start, end];
    const rows = [];
    for (let i = start; i < end; i += 1) {
      const tr = this.render(this.items[i], i);
      tr.dataset.index = String(i);
      tr.setAttribute("aria-rowindex", String(i + 2));
      rows.push(tr);
    }
    this.top.firstChild.style.height = `${start * h}px`;
    this.bottom.firstChild.style.height = `${(n - end) * h}px`;
    this.top.hidden = start === 0;
    this.bottom.hidden = end === n;
    this.body.replaceChildren(this.top, ...rows, this.bottom);
    if (!this.measured && rows.length > 0) {
      const measured = rows[0].getBoundingClientRect().height;
      if (measured > 0) {
        this.measured = true;
        if (Math.abs(measured - h) > 0.5) {
          this.rowHeight = measured;
          this.update(true);
          return;
        }
      }
    }
    if (focusedIndex !== null && focusedIndex >= start && focusedIndex < end) this.focus(focusedIndex);
  }

  /** The index of the row holding `el`, or null. */
  indexOf(el) {
    const tr = el?.closest?.("tr[data-index]");
    return tr && this.body.contains(tr) ? Number(tr.dataset.index) : null;
  }

  /** The rendered row of item `i`, if any. */
  rowAt(i) {
    return this.body.querySelector(`tr[data-index="${i}"]`);
  }

  /** Scrolls item `i` into the window (rendering it) and focuses it. */
  focus(i) {
    if (i < 0 || i >= this.items.length) return;
    let tr = this.rowAt(i);
    if (!tr) {
      const bodyTop = this.body.getBoundingClientRect().top + window.scrollY;
      window.scrollTo(0, bodyTop + i * this.rowHeight - window.innerHeight / 2);
      this.update(true);
      tr = this.rowAt(i);
    }
    const target = tr?.querySelector(this.focusable);
    if (!target) return;
    target.focus({ preventScroll: true });
    const box = tr.getBoundingClientRect();
    const head = this.table.tHead?.getBoundingClientRect().height ?? 0;
    if (box.top < head) window.scrollBy(0, box.top - head);
    else if (box.bottom > window.innerHeight) window.scrollBy(0, box.bottom - window.innerHeight);
  }

  onKey(e) {
    const at = this.indexOf(e.target);
    if (at === null || e.altKey || e.ctrlKey || e.metaKey) return;
    const to = { ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: this.items.length - 1 }[e.key];
    if (to === undefined) return;
    e.preventDefault();
    this.focus(Math.max(0, Math.min(this.items.length - 1, to)));
  }
}
