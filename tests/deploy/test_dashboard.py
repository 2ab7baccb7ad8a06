"""deploy/grafana/mixpr-gateway.json queries only what the gateway exports.

Every PromQL expression in the dashboard (panel targets and template variables) is tokenized and
walked: function names must be PromQL's, brackets must balance, and every metric name must be one
the gateway's /metrics serves, with every label the expression matches or groups by one that
metric carries. The exported names come from the gateway's own registry, exposed and parsed as
Prometheus would scrape it, so the suffixes (_total, _bucket, _count, _sum) are prometheus_client's.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "mixpr-gateway.json"

# Labels the scrape adds (the target's), not the gateway: allowed on any metric.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "container", "service", "endpoint", "node"}
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg", "delta",
    "deriv", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters",
    "hour", "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time", "ln",
    "log10", "log2", "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round",
    "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt",
    "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp",
    "vector", "year",
}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"bool", "offset", "and", "or", "unless", "atan2", "inf", "nan"}
TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<variable>\$\{[^}]+\}|\$\w+|\[\[\w+\]\])
  | (?P<number>0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?(?:ms|[smhdwy])?(?:\d+(?:ms|[smhdwy]))*|\.\d+)
  | (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=,(){}\[\]@:])
""", re.VERBOSE)


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        match = TOKEN.match(expr, pos)
        assert match, f"cannot tokenize {expr[pos:]!r} in {expr!r}"
        if match.lastgroup != "space":
            out.append((match.lastgroup, match.group()))
        pos = match.end()
    return out


def parse(expr: str) -> dict[str, set[str]]:
    """The metric names of one PromQL expression, each with the labels the expression uses on it.

    A label in a matcher belongs to its selector's metric; a label in by/without/on/ignoring belongs
    to every metric of the expression (checked against the union of their labels)."""
    toks = tokens(expr)
    metrics: dict[str, set[str]] = {}
    grouped: set[str] = set()
    stack: list[str] = []
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        following = toks[i + 1][1] if i + 1 < len(toks) else ""
        if text in "([{":
            stack.append(text)
        elif text in ")]}":
            assert stack and stack.pop() + text in ("()", "[]", "{}"), f"unbalanced {text!r} in {expr!r}"
        elif kind == "name" and text in GROUPING and following == "(":
            end = next(j for j in range(i + 2, len(toks)) if toks[j][1] == ")")
            labels = [t for k, t in toks[i + 2:end] if k == "name"]
            assert all(t == "," for k, t in toks[i + 2:end] if k != "name"), f"bad label list in {expr!r}"
            grouped.update(labels)
            i = end + 1
            continue
        elif kind == "name" and following == "(":
            assert text in FUNCTIONS | AGGREGATIONS, f"{text}() is not a PromQL function ({expr!r})"
        elif kind == "name" and text in AGGREGATIONS and following in ("by", "without"):
            pass  # sum by (le) (...)
        elif kind == "name" and text.lower() in KEYWORDS | GROUPING:
            pass
        elif kind == "name" and stack[-1:] == ["["]:
            pass  # a range or subquery step such as [5m:1m] is numbers and variables only
        elif kind == "name":
            labels = metrics.setdefault(text, set())
            if following == "{":
                end = next(j for j in range(i + 1, len(toks)) if toks[j][1] == "}")
                matchers = toks[i + 2:end]
                for j in range(0, len(matchers), 4):  # label op "value" [,]
                    label, op, value = matchers[j:j + 3]
                    assert label[0] == "name" and op[1] in ("=", "!=", "=~", "!~") and value[0] in (
                        "string", "variable"), f"bad matcher {matchers[j:j + 3]} in {expr!r}"
                    labels.add(label[1])
                i = end + 1
                continue
        i += 1
    assert not stack, f"unclosed {stack} in {expr!r}"
    assert metrics, f"no metric in {expr!r}"
    for labels in metrics.values():
        labels.update(grouped)
    return metrics


def expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    """Every panel target's PromQL (rows' collapsed panels included) and every query variable's."""
    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            query = query["query"] if isinstance(query, dict) else query
            call = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
            assert call, f"unexpected variable query {query!r}"
            yield f"group by ({call.group(2)}) ({call.group(1)})"


def exported() -> dict[str, set[str]]:
    """Each sample name the gateway's /metrics serves, with its labels (prometheus_client's own
    exposition: every labelled metric is given one child so that its samples appear)."""
    from prometheus_client import metrics as client_metrics
    from prometheus_client.parser import text_string_to_metric_families

    from gateway.metrics import Metrics  # imported here: gateway/ moves; this is its public path

    gateway = Metrics()
    for collector in vars(gateway).values():
        if isinstance(collector, client_metrics.MetricWrapperBase) and collector._labelnames:
            collector.labels(*("x" for _ in collector._labelnames))
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(gateway.exposition().decode()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def problems(dashboard: dict[str, Any], names: dict[str, set[str]]) -> list[str]:
    found = []
    for expr in expressions(dashboard):
        used = parse(expr)
        for metric in sorted(set(used) - set(names)):
            found.append(f"{metric} is not exported by the gateway (in {expr!r})")
        known = set().union(*(names[m] for m in used if m in names)) | TARGET_LABELS | {"__name__"}
        for metric, labels in sorted(used.items()):
            for label in sorted(labels - known):
                found.append(f"{metric} has no label {label!r} (in {expr!r})")
    return found


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


@pytest.fixture(scope="module")
def names() -> dict[str, set[str]]:
    return exported()


def test_every_metric_the_dashboard_queries_is_one_the_gateway_exports(dashboard, names):
    assert list(expressions(dashboard)), "the dashboard has no queries"
    assert problems(dashboard, names) == []


def test_a_metric_the_gateway_does_not_export_is_caught(dashboard, names):
    bogus = copy.deepcopy(dashboard)
    panel = next(p for p in bogus["panels"] if p.get("targets"))
    panel["targets"].append({"refId": "Z", "expr": "sum(rate(mixpr_bogus_tokens_total[5m]))"})
    panel["targets"].append({"refId": "Y", "expr": 'sum by (colour) (rate(mixpr_requests_total[5m]))'})
    panel["targets"].append({"refId": "X", "expr": "sum(rate(mixpr_requests[5m]))"})  # no _total
    found = problems(bogus, names)
    assert len(found) == 3, found
    assert "mixpr_bogus_tokens_total is not exported" in found[0]
    assert "no label 'colour'" in found[1]
    assert "mixpr_requests is not exported" in found[2]


@pytest.mark.parametrize(("expr", "metrics"), [
    ('histogram_quantile(0.95, sum by (le) (rate(mixpr_compression_seconds_bucket{model=~"$model"}'
     "[$__rate_interval])))", {"mixpr_compression_seconds_bucket": {"le", "model"}}),
    ("1 - sum(increase(a_total[$__range])) / sum(increase(b_total[1h:5m] offset 1d))",
     {"a_total": set(), "b_total": set()}),
    ('sum(x{status=~"5.."}) by (path) / on (path) group_left sum(y)',
     {"x": {"status", "path"}, "y": {"path"}}),
])
def test_the_parser_finds_metrics_and_their_labels(expr, metrics):
    assert parse(expr) == metrics


@pytest.mark.parametrize("expr", ["sum(rate(x[5m])", "rat(x[5m])", 'x{status=~5}', "sum(x))"])
def test_the_parser_refuses_broken_promql(expr):
    with pytest.raises(AssertionError):
        parse(expr)

