"""The FastAPI control plane (REST ingestion and durable acks); built by a later issue."""
