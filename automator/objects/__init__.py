"""Records of the Kubernetes kinds the automator reads, and their readers (pure)."""
