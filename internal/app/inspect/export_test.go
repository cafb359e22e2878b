package inspect

// SetBeforeCount sets a hook that l calls for each token sent, once the token is read
// and before it is counted (nil: none). A test holds requests there to put them in
// flight together.
func SetBeforeCount(l *AuthLimiter, f func()) { l.beforeCount = f }
