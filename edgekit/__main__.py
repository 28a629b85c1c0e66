from edgekit.cli import main

main()
