"""Generator service: strategies, campaigns, budgets and the campaign store."""
