package api

// SetBeforeBackupRename sets the hook called just before a backup is moved into place
// (nil: none).
func SetBeforeBackupRename(f func(root, name string)) {
	if f == nil {
		beforeBackupRename.Store(nil)
		return
	}
	beforeBackupRename.Store(&f)
}
