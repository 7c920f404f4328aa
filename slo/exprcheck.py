"""Parse PromQL offline (promql-parser, a port of Prometheus' grammar) and list the metrics it reads.

Used by tests and `slo check` to prove that every rule and dashboard expression parses and names
only catalog metrics or splitstack's own recording rules. The authoritative parse is still
Prometheus' (promtool / a live query); this one needs no server.
"""

from __future__ import annotations

import promql_parser

from contract import metrics as catalog

RECORD_PREFIX = "slo:"
# What promql_parser.parse raises (py-promql-parser, src/expr.rs): ValueError for text that does
# not parse, OverflowError for a duration beyond a timedelta, NotImplementedError for an
# extension node.
PARSE_ERRORS = (ValueError, OverflowError, NotImplementedError)


class ExprError(ValueError):
    pass


def selectors(expr: str) -> list[promql_parser.VectorSelector]:
    """Every vector selector in ``expr`` (inside range selectors, calls, operators, aggregations);
    ExprError if it does not parse."""
    try:
        root = promql_parser.parse(expr)
    except PARSE_ERRORS as e:  # carries the parser's text
        raise ExprError(f"does not parse: {e}") from None
    out: list[promql_parser.VectorSelector] = []
    stack: list[promql_parser.Expr] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, promql_parser.VectorSelector):
            out.append(node)
            continue
        if isinstance(node, promql_parser.MatrixSelector):
            stack.append(node.vector_selector)
            continue
        for attr in ("expr", "lhs", "rhs", "param"):
            child = getattr(node, attr, None)
            if child is not None and not isinstance(child, (int, float, str)):
                stack.append(child)
        stack.extend(getattr(node, "args", None) or [])
    return out


def metric_names(expr: str) -> set[str]:
    """Names of every vector selector in ``expr``; ExprError if it does not parse."""
    names: set[str] = set()
    for node in selectors(expr):
        if node.name:
            names.add(node.name)
        else:  # {__name__="x"} style
            names |= {m.value for m in node.matchers.matchers if m.name == "__name__"}
    return names


def unknown_metrics(expr: str, allow_records: bool = True) -> set[str]:
    """Metric names in ``expr`` that are neither catalog samples nor (optionally) slo: records."""
    out = set()
    for n in metric_names(expr):
        if catalog.family_of(n) is not None:
            continue
        if allow_records and n.startswith(RECORD_PREFIX):
            continue
        out.add(n)
    return out
