"""The cluster mode on NATS JetStream (issue 18): ingest, replicas, shadows, the leader lease."""
