package sqlite

// SchemaBeforeMark is the schema as it was before databases had an identity
// and a mark file, for tests of adopting such a database.
var SchemaBeforeMark = migrations[:2]
