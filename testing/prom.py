"""Reading one sample out of a /metrics page (the exposition format, parsed by prometheus-client)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample_value(text: str, name: str, **labels: str) -> float:
    """The value of the sample ``name`` whose labels include ``labels``; 0 when absent."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0
