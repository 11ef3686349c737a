"""Packs on object stores: the bounded block cache, its files and its eviction, and
`StoreFiles`, the backend a `PackReader` reads a store pack through."""
