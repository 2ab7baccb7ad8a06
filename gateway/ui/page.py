"""The page's HTML, rendered on the server from the figures ``/stats`` returns (``gateway.stats.figures``),
so what a person reads is what the JSON says. Every figure is an element with ``data-stat`` (its
name in ``/stats``), ``data-value`` (its raw value) and, per model, ``data-model``. No script and
no asset from elsewhere: the chart is inline SVG, the stylesheet is ``/ui/page.css`` from the wheel."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

from gateway.stats.figures import WINDOWS

# (name in /stats, label, kind): kind picks the formatting.
SECTIONS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    ("Saved", (
        ("net_saved", "Saved, net of resets and escalations", "money"),
        ("saved_compression", "Saved by compression", "money"),
        ("reset_write_cost", "Cache writes resets caused", "money"),
        ("escalation_cost", "Self-Route escalations", "money"),
        ("tokens_saved", "Prompt tokens removed", "tokens"),
        ("priced_share", "Requests with a price", "share"),
    )),
    ("Requests", (
        ("requests", "Chat requests", "count"),
        ("requests_passthrough", "Sent as they came", "count"),
        ("requests_compressed", "Compressed", "count"),
        ("failed_open", "Compression failed, sent whole", "count"),
        ("escalations", "Escalated by Self-Route", "count"),
        ("escalation_tokens", "Tokens sent again to escalate", "tokens"),
        ("tokens_before", "Prompt tokens received", "tokens"),
        ("tokens_after", "Prompt tokens forwarded", "tokens"),
    )),
    ("Provider cache", (
        ("warm_turns", "Warm turns", "count"),
        ("cold_turns", "Cold turns", "count"),
        ("resets", "Resets", "count"),
        ("reset_written_tokens", "Tokens resets rewrote", "tokens"),
        ("reused_tokens", "Tokens resent byte for byte", "tokens"),
        ("provider_cache_read_tokens", "Cache reads the provider reported", "tokens"),
        ("provider_cache_written_tokens", "Cache writes the provider reported", "tokens"),
    )),
    ("Observe mode (would have)", (
        ("observe_requests", "Requests observed", "count"),
        ("observe_tokens_original", "Tokens sent", "tokens"),
        ("observe_tokens_would_send", "Tokens compression would send", "tokens"),
        ("observe_tokens_saved", "Tokens it would save", "tokens"),
        ("observe_saved", "Money it would save", "money"),
    )),
)
MODEL_COLUMNS = ("requests", "requests_compressed", "tokens_before", "tokens_after", "tokens_saved",
                 "net_saved", "resets", "warm_turns", "cold_turns", "observe_tokens_saved", "priced_share")
KINDS = {name: kind for _, figures in SECTIONS for name, _, kind in figures}
RECENT_COLUMNS = ("at", "model", "route", "action", "tokens_before", "tokens_after", "reset", "cache",
                  "prices")
COLORS = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#4a5568")


def shown(value: Any, kind: str) -> str:
    """How a person reads ``value``; "n/a" for a share of no traffic (never a 0 that was no count)."""
    if value is None:
        return "n/a"
    if kind == "share":
        return f"{value:.0%}"
    if kind == "money":
        return f"{value:,.4f}"
    return f"{value:,.0f}"


def raw(value: Any) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def stat(name: str, value: Any, kind: str, model: str | None = None) -> str:
    scope = f' data-model="{escape(model)}"' if model is not None else ""
    return (f'<span class="v" data-stat="{name}"{scope} data-value="{escape(raw(value))}">'
            f"{escape(shown(value, kind))}</span>")


def tiles(totals: dict[str, Any]) -> str:
    parts = []
    for title, figures in SECTIONS:
        cells = "".join(f'<div class="tile"><div class="label">{escape(label)}</div>'
                        f"{stat(name, totals[name], kind)}</div>" for name, label, kind in figures)
        parts.append(f'<section><h2>{escape(title)}</h2><div class="tiles">{cells}</div></section>')
    return "".join(parts)


def models_table(models: dict[str, dict[str, Any]]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in ("model", *MODEL_COLUMNS))
    rows = "".join(f"<tr><td>{escape(model)}</td>"
                   + "".join(f"<td>{stat(c, figures[c], KINDS[c], model)}</td>" for c in MODEL_COLUMNS)
                   + "</tr>" for model, figures in models.items())
    return f'<section><h2>Per model</h2><table class="models"><tr>{head}</tr>{rows}</table></section>'


def chart(hours: list[dict[str, Any]], span: dict[str, int], width: int = 900, height: int = 220) -> str:
    """Prompt tokens removed per hour, stacked by model, as inline SVG (no script, no library); an
    hour without traffic keeps its place, so the bars' spacing is time."""
    if not hours:
        return '<section><h2>Per hour</h2><p class="empty">No requests in this window yet.</p></section>'
    slots = list(range(span["from"], span["to"] + 1, 3600))
    models = sorted({h["model"] for h in hours})
    color = {m: COLORS[i % len(COLORS)] for i, m in enumerate(models)}
    top = max([sum(h["tokens_saved"] for h in hours if h["hour"] == at) for at in slots] + [1.0])
    step = width / len(slots)
    bars, base = [], dict.fromkeys(slots, 0.0)
    for h in (h for h in hours if h["hour"] in base):
        x, tall = (h["hour"] - span["from"]) // 3600 * step, h["tokens_saved"] / top * (height - 20)
        base[h["hour"]] += tall
        bars.append(f'<rect x="{x + 2:.1f}" y="{height - base[h["hour"]]:.1f}" '
                    f'width="{max(step - 4, 1):.1f}" '
                    f'height="{tall:.1f}" fill="{color[h["model"]]}"><title>{escape(h["model"])} '
                    f'{_hour(h["hour"])}: {h["tokens_saved"]:,.0f} tokens removed, '
                    f'{h["requests"]:,.0f} requests</title></rect>')
    # Colour swatches as SVG fills: the page's CSP allows no inline style attribute.
    legend = "".join(f'<span class="key"><svg width="12" height="12"><rect width="12" height="12" '
                     f'fill="{color[m]}"/></svg> {escape(m)}</span>' for m in models)
    label = f"{_hour(slots[0])} to {_hour(slots[-1])} UTC, highest {top:,.0f} tokens"
    return (f'<section><h2>Prompt tokens removed per hour</h2>'
            f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">'
            f'{"".join(bars)}</svg>'
            f'<p class="legend">{legend} <span class="axis">{escape(label)}</span></p></section>')


def recent_table(rows: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{c}</th>" for c in RECENT_COLUMNS)
    body = "".join("<tr>" + "".join(f'<td data-recent="{c}">{escape(_cell(c, r.get(c)))}</td>'
                                    for c in RECENT_COLUMNS) + "</tr>" for r in rows)
    return (f'<section><h2>Last requests ({len(rows)})</h2><table class="recent"><tr>{head}</tr>{body}'
            "</table></section>")


def _cell(column: str, value: Any) -> str:
    if column == "at":
        return dt.datetime.fromtimestamp(float(value), dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, bool):
        return "yes" if value else ""
    return f"{value:,}" if isinstance(value, int) else str(value)


def _hour(at: int) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%m-%d %H:00")


def window_links(current: str) -> str:
    return " ".join(f'<a href="/ui?window={w}"{" class=on" if w == current else ""}>{w}</a>' for w in WINDOWS)


def document(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="icon" href="data:,"><link rel="stylesheet" href="/ui/page.css"></head>'
            f"<body>{body}</body></html>")


def stats_page(data: dict[str, Any]) -> str:
    since = "since the store began" if data["since"] is None else f"since {_cell('at', data['since'])} UTC"
    header = (f'<header><h1>MixPR Gateway</h1><nav>window: {window_links(data["window"])}</nav>'
              '<form method="post" action="/ui/logout"><button>Log out</button></form></header>'
              f'<p class="note">Figures {escape(since)}; money in the models\' prices (LiteLLM\'s cost '
              "map: US dollars; or the config's model_info), for requests with a price only. "
              'JSON: <a href="/stats?window=' + data["window"] + '">/stats</a>.</p>')
    body = header + tiles(data["totals"]) + chart(data["hours"], data["chart"]) + models_table(data["models"])
    return document("MixPR Gateway", body + recent_table(data["recent"]))


def login_page(problem: str | None = None) -> str:
    note = f'<p class="problem">{escape(problem)}</p>' if problem else ""
    return document("MixPR Gateway: log in", '<main class="login"><h1>MixPR Gateway</h1>' + note +
                    '<form method="post" action="/ui/login"><label>Master key <input type="password" '
                    'name="key" autocomplete="current-password" autofocus required></label>'
                    "<button>Log in</button></form></main>")
