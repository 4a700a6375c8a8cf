// Package memfd gives data to a child process as its standard input in a
// memory file (memfd_create(2)) rather than a pipe. The iptables restore
// tools from 1.8.8 take the xtables lock with alarm(wait) and never cancel
// it: the SIGALRM interrupts a read that is waiting on a pipe and ends
// their input loop early. A file's reads are not interrupted.
package memfd
