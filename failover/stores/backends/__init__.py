"""Store backends: where entries live (in process, cachetools, SQL, Redis). A new backend is a
module here that implements `failover.stores.FailoverStore`, plus its URL scheme
(`failover.stores.register_scheme`)."""
