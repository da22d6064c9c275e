"""IO behind small interfaces: the ledger store, price files, object stores. SDKs are imported lazily."""
