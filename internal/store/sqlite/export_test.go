package sqlite

import "slices"

// SchemaBeforeMark is the schema as it was before databases had an identity
// and a mark file, for tests of adopting such a database.
var SchemaBeforeMark = migrations[:2]

// SchemaBeforeBulkyLast is the schema as it was while the activities table
// kept its payload in the middle of each row, for tests of the upgrade.
var SchemaBeforeBulkyLast = migrations[:3]

// SchemaBeforeWorkflows is the schema as it was before runs and histories,
// for tests of the upgrade.
var SchemaBeforeWorkflows = migrations[:5]

// SchemaBeforeTrace is the schema as it was before activities and runs
// kept a trace context, for tests of the upgrade.
var SchemaBeforeTrace = migrations[:9]

// SchemaBeforeLanes is the schema as it was while spilled activities were
// indexed by their lane's columns, for tests of the upgrade.
var SchemaBeforeLanes = migrations[:slices.Index(migrations, laneMigration)]

// SchemaBeforeClosingAttempt is the schema as it was while every attempt,
// the closing one too, was kept in the attempts table, for tests of the
// upgrade.
var SchemaBeforeClosingAttempt = migrations[:slices.Index(migrations, closingAttemptMigration)]
