// Package llmstream shows the stream guard (github.com/sessionwatchdog/watchdog/stream)
// around the streams of openai-go and anthropic-sdk-go, tested against a
// local server that streams server-sent events and then stalls, sends only
// keep-alive pings, or thinks for a long time before its first chunk.
package llmstream
