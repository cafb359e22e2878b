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

// SetBeforeCount sets a hook that l calls for each token sent, once the token is read
// and before it is counted (nil: none). A test holds requests there to put them in
// flight together.
func SetBeforeCount(l *AuthLimiter, f func()) { l.beforeCount = f }
