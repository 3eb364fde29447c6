"""Latest-state tables' key scheduling (UpStream): update queues, staleness per key, simulator."""
