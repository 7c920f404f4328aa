from worker.tracing import new_trace, parse_traceparent


def test_parse_valid_and_child_keeps_trace_id() -> None:
    t = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert t is not None and t.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    child = t.child()
    assert child.trace_id == t.trace_id and child.span_id != t.span_id
    assert child.traceparent.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")


def test_invalid_values_start_a_new_trace() -> None:
    for bad in (None, "", "garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01"):
        assert parse_traceparent(bad) is None
    t = new_trace()
    assert parse_traceparent(t.traceparent) == t
