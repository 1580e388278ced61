"""The `epochlog` command line: one entry point for servers, the local cluster and tools."""
