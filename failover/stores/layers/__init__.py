"""Store layers: each wraps a `failover.stores.FailoverStore` and adds one thing (a deadline,
a copy, queued writes, batched reads, tenant routing, a near copy, hedged reads)."""
