"""The page around the charts: one HTML document with its CSS, its script and its data inline.

The script (plain JavaScript, no library) sorts tables by a header click, shows the ``data-tip`` of
the mark under the pointer or keyboard focus, switches the detail panel a table row names, and,
when the page is opened with ``#selfcheck``, writes what it checked into ``<body data-selfcheck>``:
how many charts drew and whether each has a non-zero size, the hover label of the first mark with
``data-layout`` (it must name that layout), horizontal overflow at the window's width, and every
error and ``console.error`` seen. The browser tests read that back with ``chromium --dump-dom``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import simcore

__all__ = ["TableColumn", "command_line", "page", "section", "table"]

_CSS = """
:root{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1a1a;background:#fff}
body{margin:0 auto;max-width:1240px;padding:12px 16px 40px;line-height:1.4}
h1{font-size:1.45rem;margin:.2em 0}h2{font-size:1.2rem;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
h3{font-size:1.05rem;margin:1em 0 .3em}main p,main li,figcaption{overflow-wrap:anywhere}
.meta{color:#444;font-size:.9rem}.meta code{word-break:break-all;background:#f3f3f3;padding:1px 4px}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.85rem;margin:.3em 0}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#f0f0f0;cursor:pointer;user-select:none}th.text,td.text{text-align:left}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
tr.pick{cursor:pointer}tr.pick:hover,tr.pick:focus{background:#eef5ff}tr.chosen{background:#dcebff}
tr.best td:first-child{font-weight:bold}
figure{margin:.6em 0;max-width:700px}
figcaption{font-weight:600;font-size:.92rem}
svg.chart{width:100%;height:auto;display:block;font-size:11px;background:#fcfcfc}
svg.chart line.grid{stroke:#e4e4e4}svg.chart .axis-label{font-size:12px;fill:#333}
svg.chart .guide{fill:none;stroke:#555;stroke-dasharray:4 3}svg.chart .band{fill:#999;opacity:.18;stroke:none}
svg.chart .limit{stroke:#b00;stroke-width:1.5;stroke-dasharray:5 3}
svg.chart .mark:hover,svg.chart .mark:focus{stroke:#000;stroke-width:2;outline:none}
.legend{list-style:none;padding:0;margin:.2em 0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:.85rem}
.legend svg{vertical-align:middle}
.swatch{display:inline-block;width:12px;height:12px;vertical-align:middle;border:1px solid #333}
.guide-line{display:inline-block;width:18px;border-top:2px dashed #555;vertical-align:middle}
.guide-band{display:inline-block;width:18px;height:10px;background:#999;opacity:.35;vertical-align:middle}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,520px),1fr));gap:8px 24px}
.note{background:#fff8e1;border-left:4px solid #e6a700;padding:4px 10px}
.rec{background:#eaf6ea;border-left:4px solid #2e7d32;padding:4px 10px}
#tip{position:fixed;z-index:10;max-width:min(420px,90vw);background:#222;color:#fff;padding:4px 8px;
border-radius:4px;font-size:.82rem;pointer-events:none;white-space:pre-line}
@media (max-width:600px){body{padding:8px}th,td{padding:2px 4px;font-size:.78rem}}
"""

_JS = r"""
(function(){
var errors=[];
window.addEventListener('error',function(e){errors.push(String(e.message||e));});
var consoleError=console.error;
console.error=function(){errors.push(Array.prototype.join.call(arguments,' '));consoleError.apply(console,arguments);};
var tip=document.getElementById('tip');
function show(el,x,y){tip.textContent=el.getAttribute('data-tip');tip.hidden=false;
 var w=tip.offsetWidth,h=tip.offsetHeight;
 tip.style.left=Math.max(4,Math.min(x+12,window.innerWidth-w-4))+'px';
 tip.style.top=Math.max(4,(y+16+h>window.innerHeight)?y-h-8:y+16)+'px';}
document.addEventListener('mouseover',function(e){var el=e.target.closest?e.target.closest('[data-tip]'):null;
 if(el){show(el,e.clientX,e.clientY);}else{tip.hidden=true;}});
document.addEventListener('focusin',function(e){var el=e.target.closest?e.target.closest('[data-tip]'):null;
 if(el){var r=el.getBoundingClientRect();show(el,r.left,r.top);}});
document.addEventListener('focusout',function(){tip.hidden=true;});
function key(td){var v=td.getAttribute('data-v');return v===null?td.textContent:v;}
document.querySelectorAll('table.sortable').forEach(function(t){
 t.querySelectorAll('th').forEach(function(th,i){th.tabIndex=0;
  function sort(){var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
   var up=th.getAttribute('aria-sort')!=='ascending';
   t.querySelectorAll('th').forEach(function(o){o.removeAttribute('aria-sort');});
   th.setAttribute('aria-sort',up?'ascending':'descending');
   rows.sort(function(a,b){var x=key(a.cells[i]),y=key(b.cells[i]),nx=parseFloat(x),ny=parseFloat(y);
    var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:String(x).localeCompare(String(y));return up?c:-c;});
   rows.forEach(function(r){body.appendChild(r);});}
  th.addEventListener('click',sort);th.addEventListener('keydown',function(e){if(e.key==='Enter'){sort();}});});});
function choose(id){document.querySelectorAll('.detail').forEach(function(d){d.hidden=d.id!==id;});
 document.querySelectorAll('tr.pick').forEach(function(r){r.classList.toggle('chosen',r.getAttribute('data-detail')===id);});}
var picks=document.querySelectorAll('tr.pick');
picks.forEach(function(r){r.tabIndex=0;var go=function(){choose(r.getAttribute('data-detail'));};
 r.addEventListener('click',go);r.addEventListener('keydown',function(e){if(e.key==='Enter'){go();}});});
var first=document.querySelector('.detail');if(first){choose(first.id);}
function selfcheck(){
 document.querySelectorAll('.detail').forEach(function(d){d.hidden=false;});
 var charts=Array.prototype.slice.call(document.querySelectorAll('svg.chart'));
 var empty=charts.filter(function(s){var r=s.getBoundingClientRect();return !(r.width>0&&r.height>0);}).length;
 var marks=document.querySelectorAll('svg.chart .mark').length;
 var tiny=Array.prototype.filter.call(document.querySelectorAll('svg.chart .mark'),function(m){
  var r=m.getBoundingClientRect();return !(r.width>0&&r.height>0);}).length;
 var p=document.querySelector('[data-layout]'),hover=null,layout=null;
 if(p){layout=p.getAttribute('data-layout');var r=p.getBoundingClientRect();
  p.dispatchEvent(new MouseEvent('mouseover',{bubbles:true,clientX:r.left,clientY:r.top}));
  hover=tip.hidden?null:tip.textContent;}
 var out={charts:charts.length,empty_charts:empty,marks:marks,empty_marks:tiny,hover:hover,layout:layout,
  hover_names_layout:!!(hover&&layout&&hover.indexOf(layout)>=0),
  overflow_px:Math.max(0,document.documentElement.scrollWidth-window.innerWidth),
  width:window.innerWidth,errors:errors};
 document.body.setAttribute('data-selfcheck',JSON.stringify(out));}
if(location.hash==='#selfcheck'){window.addEventListener('load',function(){setTimeout(selfcheck,0);});}
})();
"""


def command_line(prog: str, argv: Sequence[str]) -> str:
    """The command as a user would type it again (arguments quoted where a shell needs it)."""
    return shlex.join([*prog.split(), *argv])


def section(title: str, *body: str, anchor: str = "") -> str:
    ident = f' id="{escape(anchor)}"' if anchor else ""
    return f"<section{ident}><h2>{escape(title)}</h2>{''.join(body)}</section>"


def _plain(value: Any) -> str:
    return "-" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class TableColumn:
    """One column: its header, the record's value (what it sorts by), the text shown, and whether
    it is text (left-aligned)."""

    header: str
    value: Callable[[Mapping[str, Any]], Any]
    text: Callable[[Any], str] = _plain
    is_text: bool = False


def table(
    columns: Sequence[TableColumn],
    rows: Sequence[Mapping[str, Any]],
    *,
    caption: str = "",
    row_attrs: Sequence[Mapping[str, str]] | None = None,
) -> str:
    """A sortable table: each cell shows ``text(value(row))`` and sorts by the raw value (``data-v``)."""
    head = "".join(
        f'<th scope="col"{" class=text" if c.is_text else ""}>{escape(c.header)}</th>' for c in columns
    )
    body = []
    for i, row in enumerate(rows):
        attrs = row_attrs[i] if row_attrs else {}
        extra = "".join(f' {escape(k)}="{escape(v)}"' for k, v in attrs.items())
        cells = []
        for c in columns:
            value = c.value(row)
            sort = "" if value is None else f' data-v="{escape(str(value))}"'
            cls = ' class="text"' if c.is_text else ""
            cells.append(f"<td{cls}{sort}>{escape(c.text(value))}</td>")
        body.append(f"<tr{extra}>{''.join(cells)}</tr>")
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return (
        f'<div class="scroll"><table class="sortable">{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def page(title: str, command: str, body: Sequence[str], data: Mapping[str, Any]) -> str:
    """The whole document: title, command and version, the sections, the data as JSON, the script."""
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{escape(title)}</h1>"
        f'<p class="meta">trainsim {escape(simcore.__version__)} &middot; made by <code>{escape(command)}</code></p>'
        f"</header><main>{''.join(body)}</main>"
        '<div id="tip" role="tooltip" hidden></div>'
        f'<script type="application/json" id="trainsim-data">{blob}</script>'
        f"<script>{_JS}</script></body></html>\n"
    )
