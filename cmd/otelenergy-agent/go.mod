module github.com/otelenergy/otelenergy/cmd/otelenergy-agent

go 1.26.0

require github.com/otelenergy/otelenergy v0.0.0-00010101000000-000000000000

replace github.com/otelenergy/otelenergy => ../..
