"""Publisher: push ResourceSync change notifications to an rshub hub."""
