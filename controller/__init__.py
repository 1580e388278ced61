"""The epochlog controller: cluster metadata, broker generations (KIP-380), elections."""
