"""What every simulated component shares: the store and its registry, clock, events, indexes."""
