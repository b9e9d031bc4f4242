from vtrain.cli.main import main

main()
